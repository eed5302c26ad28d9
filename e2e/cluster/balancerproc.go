package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The environment that makes a test binary run as a balancer process
// (see Main): the backends, comma-separated, and the address to listen
// on with SO_REUSEPORT (default 127.0.0.1:0).
const (
	balancerEnv     = "BYOC_CLUSTER_BALANCER"
	balancerAddrEnv = "BYOC_CLUSTER_BALANCER_ADDR"
)

// BalancerGroup is several balancer processes sharing one listening
// port, as a vendor scales a layer-4 balancer out: each process binds
// the port with SO_REUSEPORT, so the kernel spreads new connections
// across them (by a hash of each connection's addresses), and each
// checks the backends' /readyz on its own and relays its share of the
// connections. A process has its own file table, so a fleet larger than
// one process's descriptor limit allows (two per relayed connection)
// fits across several. The processes are this test binary run again
// (Main runs the balancer instead of the tests), killed at cleanup.
type BalancerGroup struct {
	addr  string
	procs []*balancerProc
}

type balancerProc struct {
	cmd   *exec.Cmd
	stats string // the address of its /stats
	stdin io.Closer
	done  chan struct{}
}

// StartBalancerProcesses starts n balancer processes in front of
// backends (host:port), all listening on one loopback port, and returns
// once every one accepts. The test binary must run its tests through
// Main.
func StartBalancerProcesses(tb testing.TB, n int, backends ...string) *BalancerGroup {
	tb.Helper()
	mainMu.Lock()
	active := mainActive
	mainMu.Unlock()
	if !active {
		tb.Fatal("cluster.StartBalancerProcesses: call cluster.Main from the package's TestMain, which runs the re-executed test binary as a balancer")
	}
	if n < 1 {
		tb.Fatalf("cluster.StartBalancerProcesses: %d processes", n)
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	g := &BalancerGroup{addr: "127.0.0.1:0"}
	tb.Cleanup(g.Close)
	for range n {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), balancerEnv+"="+strings.Join(backends, ","), balancerAddrEnv+"="+g.addr)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			tb.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		p := &balancerProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		go func() { cmd.Wait(); close(p.done) }()
		g.procs = append(g.procs, p)
		// Its first line names the address it listens on (the first
		// process's chooses the port the others share) and its stats'.
		line, err := bufio.NewReader(stdout).ReadString('\n')
		var addr string
		if _, serr := fmt.Sscanf(line, "balancer %s stats %s", &addr, &p.stats); err != nil || serr != nil {
			tb.Fatalf("balancer process %d: %q: %v %v", len(g.procs), line, err, serr)
		}
		g.addr = addr
	}
	return g
}

// Addr is the address the processes share; URL its base URL, what
// agentd --ims names.
func (g *BalancerGroup) Addr() string { return g.addr }

// URL is the balancers' base URL.
func (g *BalancerGroup) URL() string { return "http://" + g.addr }

// PIDs are the balancer processes' process ids.
func (g *BalancerGroup) PIDs() []int {
	var ids []int
	for _, p := range g.procs {
		ids = append(ids, p.cmd.Process.Pid)
	}
	return ids
}

// Close ends every balancer process (closing its stdin ends it; killed
// if it has not after five seconds) and waits for it.
func (g *BalancerGroup) Close() {
	for _, p := range g.procs {
		p.stdin.Close()
	}
	for _, p := range g.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// BalancerStats is what one balancer process reports: connections
// routed to each backend so far, open to each now, the times each was
// marked unhealthy, and its failed accepts.
type BalancerStats struct {
	Routed          []int  `json:"routed"`
	Active          []int  `json:"active"`
	Downs           []int  `json:"downs"`
	AcceptErrors    int    `json:"accept_errors"`
	LastAcceptError string `json:"last_accept_error,omitempty"`
}

// Stats returns each process's stats, in the order they started.
func (g *BalancerGroup) Stats() ([]BalancerStats, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	var all []BalancerStats
	for _, p := range g.procs {
		r, err := c.Get("http://" + p.stats + "/stats")
		if err != nil {
			return nil, err
		}
		var s BalancerStats
		err = json.NewDecoder(r.Body).Decode(&s)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, s)
	}
	return all, nil
}

// Active returns how many relayed connections each backend has now,
// over every process (nil if a process did not answer).
func (g *BalancerGroup) Active() []int {
	st, err := g.Stats()
	if err != nil {
		return nil
	}
	var sum []int
	for _, s := range st {
		if sum == nil {
			sum = make([]int, len(s.Active))
		}
		for i, v := range s.Active {
			sum[i] += v
		}
	}
	return sum
}

// runBalancerProcess is a balancer process's main (Main runs it when
// balancerEnv is set): it listens with SO_REUSEPORT on
// balancerAddrEnv, serves its stats on a loopback port of its own,
// prints "balancer ADDR stats ADDR" and relays until its stdin closes
// (its parent ended) or a SIGTERM.
func runBalancerProcess() int {
	backends := strings.Split(os.Getenv(balancerEnv), ",")
	addr := os.Getenv(balancerAddrEnv)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "balancer: listen %s: %v\n", addr, err)
		return 1
	}
	b := newBalancer(ln, backends)
	defer b.Close()
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "balancer: stats: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b.mu.Lock()
		s := BalancerStats{Routed: append([]int(nil), b.routed...), Active: append([]int(nil), b.active...), Downs: append([]int(nil), b.downs...), AcceptErrors: b.acceptErrs}
		if b.lastAcceptErr != nil {
			s.LastAcceptError = b.lastAcceptErr.Error()
		}
		b.mu.Unlock()
		json.NewEncoder(w).Encode(s)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(sln)
	defer srv.Close()
	fmt.Printf("balancer %s stats %s\n", ln.Addr(), sln.Addr())
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-stop:
	case <-sig:
	}
	return 0
}
