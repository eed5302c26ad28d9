package cluster

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// IMSProcess is imsd run as its own process, built from this tree: for
// tests that kill and restart it (the fault harness) and benchmarks that
// read its memory and CPU.
type IMSProcess struct {
	tb testing.TB
	// Addr is its listen address, kept across restarts.
	Addr    string
	DataDir string
	// Token is the admin token the first start wrote.
	Token string
	// tokenFile is where that token is written: --admin-token-file
	// when args name one (replicas share one), else DATA-DIR/admin.token.
	tokenFile string
	args      []string
	out       io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartIMSProcess starts imsd on a free loopback port with a new data dir
// and args added to its command line (--database-url, --lease, ...),
// writing its output to out (nil: discarded), and kills it at cleanup.
func StartIMSProcess(tb testing.TB, out io.Writer, args ...string) *IMSProcess {
	tb.Helper()
	p := newIMSProcess(tb, out, args...)
	p.Start()
	p.readToken()
	return p
}

// newIMSProcess prepares an imsd process (not started) and kills it at
// cleanup.
func newIMSProcess(tb testing.TB, out io.Writer, args ...string) *IMSProcess {
	tb.Helper()
	if out == nil {
		out = io.Discard
	}
	p := &IMSProcess{tb: tb, Addr: FreeAddr(tb), DataDir: tb.TempDir(), out: out}
	p.tokenFile = filepath.Join(p.DataDir, "admin.token")
	for i, a := range args {
		if a == "--admin-token-file" && i+1 < len(args) {
			p.tokenFile = args[i+1]
		}
	}
	p.args = append([]string{"--addr", p.Addr, "--data-dir", p.DataDir}, args...)
	tb.Cleanup(p.Kill)
	return p
}

func (p *IMSProcess) readToken() {
	p.tb.Helper()
	b, err := os.ReadFile(p.tokenFile)
	if err != nil {
		p.tb.Fatal(err)
	}
	p.Token = strings.TrimSpace(string(b))
}

// FreeAddr returns a loopback address with a port free a moment ago,
// below the kernel's range of ephemeral ports: a process restarted on
// the same address (imsd after kill -9) found its port taken for good by
// another process's outgoing connection, which the kernel had given that
// port while it was free (e2e/fault seed 1 in CI: "bind: address already
// in use" for 40 s). Ports this process handed out are not handed out
// again; without room below the range it falls back to port 0.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	lo := ephemeralLow()
	if lo > freeAddrLow+1000 {
		freeAddrMu.Lock()
		defer freeAddrMu.Unlock()
		for range 200 {
			port := freeAddrLow + rand.IntN(lo-freeAddrLow)
			if freeAddrGiven[port] {
				continue
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			ln.Close()
			freeAddrGiven[port] = true
			return ln.Addr().String()
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// freeAddrLow is the lowest port FreeAddr picks: above the ports
// services commonly take.
const freeAddrLow = 20000

var (
	freeAddrMu    sync.Mutex
	freeAddrGiven = map[int]bool{}
)

// ephemeralLow is where the kernel's range of ports for outgoing
// connections starts (Linux's default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil {
				return lo
			}
		}
	}
	return 32768
}

// URL is imsd's base URL.
func (p *IMSProcess) URL() string { return "http://" + p.Addr }

// PID is the running process's id.
func (p *IMSProcess) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Start starts imsd (again, after Kill) on the same address and data
// dir, and waits until it is ready.
func (p *IMSProcess) Start() {
	p.tb.Helper()
	bin := filepath.Join(Binaries(p.tb), "imsd")
	deadline := time.Now().Add(20 * time.Second)
	for {
		done := p.launch(bin)
		if p.waitReady(done) {
			return
		}
		if time.Now().After(deadline) {
			p.tb.Fatal("imsd did not become ready")
		}
		time.Sleep(100 * time.Millisecond) // a restart's port may still be held
	}
}

// launch starts the process and returns the channel closed when it exits.
func (p *IMSProcess) launch(bin string) chan struct{} {
	p.tb.Helper()
	cmd := exec.Command(bin, p.args...)
	dieWithTest(cmd)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("start imsd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return done
}

// waitReady waits for /readyz; false if the process exited first.
func (p *IMSProcess) waitReady(done chan struct{}) bool {
	c := &http.Client{Timeout: time.Second}
	for range 600 {
		select {
		case <-done:
			return false
		default:
		}
		if _, err := os.Stat(p.tokenFile); err == nil {
			if r, err := c.Get(p.URL() + "/readyz"); err == nil {
				r.Body.Close()
				if r.StatusCode == http.StatusOK {
					return true
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// Kill kills imsd with SIGKILL, as a crash would, and waits for it.
func (p *IMSProcess) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// Client is an operator client with the admin token.
func (p *IMSProcess) Client() imsv1connect.OperatorServiceClient {
	return imsv1connect.NewOperatorServiceClient(agent.DefaultHTTPClient(), p.URL(), connect.WithInterceptors(Bearer(p.Token)))
}
