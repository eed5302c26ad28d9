package egress_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/egress"
)

// rawUpstream accepts TCP connections and keeps what each one sent.
type rawUpstream struct {
	addr     string
	accepted atomic.Int64
	mu       sync.Mutex
	got      []*strings.Builder
	ended    []chan struct{}
}

func startRawUpstream(t *testing.T) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &rawUpstream{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			b, end := &strings.Builder{}, make(chan struct{})
			u.mu.Lock()
			u.got, u.ended = append(u.got, b), append(u.ended, end)
			u.mu.Unlock()
			go func() {
				defer close(end)
				defer c.Close()
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					u.mu.Lock()
					b.Write(buf[:n])
					u.mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return u
}

// received is what connection i sent so far, waiting until it holds
// want (or 10 s).
func (u *rawUpstream) received(t *testing.T, i int, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u.mu.Lock()
		var s string
		if i < len(u.got) {
			s = u.got[i].String()
		}
		u.mu.Unlock()
		if strings.Contains(s, want) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Once Live fails (the agent's lease on the job ran out, as after the
// agent was frozen with a request in hand), nothing more goes upstream:
// an open tunnel forwards none of the bytes that arrive after, and new
// connections, by CONNECT, plain HTTP or SOCKS5, are refused with a
// clear answer before anything is dialed. Before the gate the bytes went
// through, after imsd had handed the job to another agent (the fault
// harness's random schedule 4).
func TestProxySendsNothingOnceNotLive(t *testing.T) {
	up := startRawUpstream(t)
	var lost atomic.Bool
	p := &egress.Proxy{Live: func() error {
		if lost.Load() {
			return errors.New("the agent's lease on the job ran out")
		}
		return nil
	}}
	tp := startProxy(t, p, up.addr)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tp.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		return c
	}

	tunnel := dial()
	fmt.Fprintf(tunnel, "CONNECT world.test:80 HTTP/1.1\r\nHost: world.test:80\r\n\r\n")
	br := bufio.NewReader(tunnel)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT while live: %v %v", resp, err)
	}
	io.WriteString(tunnel, "beat 1\n")
	if got := up.received(t, 0, "beat 1\n"); got != "beat 1\n" {
		t.Fatalf("upstream got %q while live, want the first beat", got)
	}

	lost.Store(true)
	io.WriteString(tunnel, "beat 2\n")
	// The proxy ends the tunnel: upstream sees its end, without the
	// second beat, and so does the client.
	up.mu.Lock()
	end := up.ended[0]
	up.mu.Unlock()
	select {
	case <-end:
	case <-time.After(10 * time.Second):
		t.Fatal("the tunnel's upstream side stayed open after the lease ran out")
	}
	// Ended: what it holds is all it got.
	if got := up.received(t, 0, ""); got != "beat 1\n" {
		t.Errorf("upstream got %q after the lease ran out, want the first beat only", got)
	}
	if _, err := io.ReadAll(br); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Errorf("client side of the tunnel: %v", err)
	}

	// New connections: refused, nothing dialed.
	c := dial()
	fmt.Fprintf(c, "CONNECT world.test:80 HTTP/1.1\r\nHost: world.test:80\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("CONNECT once not live: %v %v, want 503", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "lease on the job ran out") {
		t.Errorf("CONNECT refusal says %q, want the reason", body)
	}
	c = dial()
	fmt.Fprintf(c, "POST http://world.test/r HTTP/1.1\r\nHost: world.test\r\nContent-Length: 4\r\n\r\nbeat")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("plain HTTP once not live: %v %v, want 503", resp, err)
	}
	c = dial()
	c.Write([]byte{5, 1, 0})
	hs := make([]byte, 2)
	if _, err := io.ReadFull(c, hs); err != nil || hs[1] != 0 {
		t.Fatalf("SOCKS greeting: %v %v", hs, err)
	}
	c.Write(append([]byte{5, 1, 0, 3, byte(len("world.test"))}, append([]byte("world.test"), 0, 80)...))
	rep := make([]byte, 2)
	if _, err := io.ReadFull(c, rep); err != nil || rep[1] != 1 {
		t.Fatalf("SOCKS CONNECT once not live: reply %v %v, want general failure (1)", rep, err)
	}
	if n := up.accepted.Load(); n != 1 {
		t.Errorf("upstream accepted %d connections, want only the tunnel made while live", n)
	}
	if dialed, _ := tp.get(); len(dialed) != 1 {
		t.Errorf("the proxy dialed %v, want the first tunnel only", dialed)
	}
}
