package cluster

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// TestBalancerProcessesSharePort starts two balancer processes on one
// port (SO_REUSEPORT) in front of two backends, and sends 64 requests,
// each on a new connection: the kernel spreads them across both
// processes, each process round-robins across both backends, and every
// request is answered.
func TestBalancerProcessesSharePort(t *testing.T) {
	var backends []string
	for _, name := range []string{"a", "b"} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		backends = append(backends, strings.TrimPrefix(s.URL, "http://"))
	}
	g := StartBalancerProcesses(t, 2, backends...)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	const n = 64
	got := map[string]int{}
	for range n {
		r, err := c.Get(g.URL() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[string(b)]++
	}
	if got["a"] == 0 || got["b"] == 0 || got["a"]+got["b"] != n {
		t.Fatalf("answers by backend: %v, want both of %d", got, n)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, s := range st {
		routed := 0
		for _, v := range s.Routed {
			routed += v
		}
		if routed == 0 {
			t.Errorf("balancer process %d routed no connection: %+v (the kernel spreads a shared port's connections)", i, st)
		}
		total += routed
	}
	if total != n {
		t.Errorf("routed %d connections in all, want %d: %+v", total, n, st)
	}
	if len(g.PIDs()) != 2 || g.PIDs()[0] == g.PIDs()[1] {
		t.Errorf("pids %v", g.PIDs())
	}
}

// TestBalancerDialsOffTheAcceptLoop: a backend whose dial hangs (its
// accept queue full: SYNs dropped) holds up only the connection routed
// to it; a connection accepted after it is answered at once by the
// other backend, not after the hung dial's timeout (a second).
func TestBalancerDialsOffTheAcceptLoop(t *testing.T) {
	hung := blackhole(t)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "good")
	}))
	t.Cleanup(good.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 4)
	b := newBalancer(notifyListener{ln, accepted}, []string{hung, strings.TrimPrefix(good.URL, "http://")})
	t.Cleanup(b.Close)
	get := func() (string, time.Duration, error) {
		start := time.Now()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		r, err := c.Get(b.URL() + "/")
		if err != nil {
			return "", 0, err
		}
		defer r.Body.Close()
		body, err := io.ReadAll(r.Body)
		return string(body), time.Since(start), err
	}
	type answer struct {
		body string
		took time.Duration
		err  error
	}
	first := make(chan answer, 1)
	go func() { s, d, err := get(); first <- answer{s, d, err} }()
	// The first connection is routed to the hung backend (round robin
	// starts there); wait until the balancer has taken it.
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the first connection never reached the balancer")
	}
	s, took, err := get()
	if err != nil || s != "good" {
		t.Fatalf("second connection: %q, %v", s, err)
	}
	select {
	case a := <-first:
		t.Fatalf("the first connection (%q, %v, %s) was answered before the second (%s): the second waited for its dial", a.body, a.err, a.took, took)
	default:
	}
	// The first ends either way (failed over, or cut by the hung
	// backend once its queue let it in); only its delay matters here.
	a := <-first
	if a.err == nil && a.took < 900*time.Millisecond {
		t.Fatalf("the first connection took %s: it was not routed to the hung backend first", a.took)
	}
}

// blackhole is a loopback address whose dials hang: a listener with a
// backlog of 0, its one queue place taken and never accepted.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: connections that complete until one no longer does.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
		if i > 16 {
			t.Skip("this system's listen queue never fills: no hung dial to test with")
		}
	}
}

// notifyListener tells accepted of each connection it accepts.
type notifyListener struct {
	net.Listener
	accepted chan struct{}
}

func (l notifyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted <- struct{}{}
	}
	return c, err
}
