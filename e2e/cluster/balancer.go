package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Balancer is a layer-4 (TCP) round-robin load balancer on loopback, as
// a vendor puts in front of imsd replicas: each new connection goes to
// the next backend that passed its last health check (GET /readyz every
// 100ms) and accepts the dial; bytes are relayed untouched, so HTTP/2
// (h2c) and the agents' end-to-end channel pass through. A backend that
// dies takes its connections with it; their clients reconnect through
// the balancer to a survivor.
type Balancer struct {
	ln       net.Listener
	backends []string
	stop     context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	healthy []bool
	next    int
	conns   map[net.Conn]struct{}
	// routed counts the connections sent to each backend; active those
	// open now.
	routed, active []int
	// downs counts the times each backend was marked unhealthy.
	downs []int
	// acceptErrs counts failed accepts (a full file table), lastAcceptErr
	// the last one's error.
	acceptErrs    int
	lastAcceptErr error
	// closed is set by Close: a connection whose backend answers after
	// it is cut at once.
	closed bool
}

// AcceptErrors returns how many accepts failed and the last one's error.
func (b *Balancer) AcceptErrors() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acceptErrs, b.lastAcceptErr
}

// StartBalancer starts a balancer in front of backends (host:port) and
// stops it, cutting every connection, at cleanup.
func StartBalancer(tb testing.TB, backends ...string) *Balancer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	b := newBalancer(ln, backends)
	tb.Cleanup(b.Close)
	return b
}

// newBalancer starts a balancer accepting on ln in front of backends;
// Close stops it.
func newBalancer(ln net.Listener, backends []string) *Balancer {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Balancer{ln: ln, backends: backends, stop: cancel, conns: map[net.Conn]struct{}{},
		healthy: make([]bool, len(backends)), routed: make([]int, len(backends)), active: make([]int, len(backends)), downs: make([]int, len(backends))}
	for i := range b.healthy {
		b.healthy[i] = true // until the first check says otherwise
	}
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.serve() }()
	go func() { defer b.wg.Done(); b.check(ctx) }()
	return b
}

// Addr is the balancer's listen address; URL its base URL.
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

// URL is the balancer's base URL, what agentd --ims and the CLI name.
func (b *Balancer) URL() string { return "http://" + b.Addr() }

// Close stops accepting, cuts every relayed connection and waits for the
// health checks to stop.
func (b *Balancer) Close() {
	b.stop()
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Routed returns how many connections went to each backend so far.
func (b *Balancer) Routed() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.routed...)
}

// Downs returns how many times each backend was marked unhealthy.
func (b *Balancer) Downs() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.downs...)
}

// Active returns how many relayed connections each backend has now.
func (b *Balancer) Active() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.active...)
}

// check marks each backend healthy when its /readyz answers 200, and
// unhealthy after three checks in a row that did not (each with a timeout
// of two seconds), as a cloud balancer's thresholds do: one slow answer
// on a busy machine does not take a replica out. Each backend is checked
// on its own, every 100 ms.
func (b *Balancer) check(ctx context.Context) {
	const unhealthyAfter = 3
	tr := &http.Transport{DisableKeepAlives: true}
	c := &http.Client{Timeout: 2 * time.Second, Transport: tr}
	var wg sync.WaitGroup
	for i, be := range b.backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			failed := 0
			for {
				ok := false
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+be+"/readyz", nil)
				if r, err := c.Do(req); err == nil {
					ok = r.StatusCode == http.StatusOK
					r.Body.Close()
				}
				if ok {
					failed = 0
				} else {
					failed++
				}
				b.mu.Lock()
				if ok {
					b.healthy[i] = true
				} else if failed >= unhealthyAfter {
					if b.healthy[i] {
						b.downs[i]++
					}
					b.healthy[i] = false
				}
				b.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	// A check's dial to a backend that does not answer outlives its
	// request (net/http keeps it for a later one): cancel it.
	tr.CloseIdleConnections()
}

func (b *Balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// A full file table (EMFILE) and its kin pass: keep
			// accepting, as net/http's server does, or every later
			// connection waits in the backlog for good.
			b.mu.Lock()
			b.acceptErrs++
			b.lastAcceptErr = err
			b.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// Each connection dials its backend on a goroutine of its own: a
		// slow or unanswering backend (a dial waits up to a second) must
		// not hold up the connections accepted after it.
		b.mu.Lock()
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.relay(c) }()
	}
}

// relay connects c to a backend and copies both ways until either side
// closes.
func (b *Balancer) relay(c net.Conn) {
	s, i := b.dial()
	b.mu.Lock()
	if s == nil || b.closed {
		delete(b.conns, c)
		b.mu.Unlock()
		c.Close()
		if s != nil {
			s.Close()
		}
		return
	}
	b.conns[s] = struct{}{}
	b.active[i]++
	b.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			b.mu.Lock()
			b.active[i]--
			b.mu.Unlock()
		})
	}
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.pipe(s, c); done() }()
	b.pipe(c, s)
	done()
}

// dial connects to the next healthy backend that accepts, round robin,
// and returns the connection and the backend's index; nil if none does.
func (b *Balancer) dial() (net.Conn, int) {
	for range len(b.backends) {
		b.mu.Lock()
		i := b.next
		b.next = (b.next + 1) % len(b.backends)
		ok := b.healthy[i]
		b.mu.Unlock()
		if !ok {
			continue
		}
		s, err := net.DialTimeout("tcp", b.backends[i], time.Second)
		if err != nil {
			continue
		}
		b.mu.Lock()
		b.routed[i]++
		b.mu.Unlock()
		return s, i
	}
	return nil, -1
}

// relayBuffers are the relay's copy buffers, 16 KiB each.
var relayBuffers = sync.Pool{New: func() any { return new([16 << 10]byte) }}

func (b *Balancer) pipe(dst, src net.Conn) {
	// Copied through a buffer, not io.Copy's TCP-to-TCP splice: splice
	// holds a pipe (two descriptors) per direction for as long as the
	// connection lives, six descriptors per relayed connection in all,
	// which capped a benchmark's fleet at about 2,850 agents under the
	// 20,000-descriptor limit (docs/performance-storm.md).
	buf := relayBuffers.Get().(*[16 << 10]byte)
	io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf[:])
	relayBuffers.Put(buf)
	dst.Close()
	src.Close()
	b.mu.Lock()
	delete(b.conns, dst)
	delete(b.conns, src)
	b.mu.Unlock()
}
