package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Resolver finds a name's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Denial is one connection the proxy refused.
type Denial struct {
	// Host is what the client asked for (a name or an address), Addr
	// the address the refusal is about (zero when the name did not
	// resolve to an address at all).
	Host string
	Addr netip.AddrPort
	Rule string
}

func (d Denial) String() string {
	if d.Addr.IsValid() && d.Host != d.Addr.Addr().String() {
		return fmt.Sprintf("%s (%s): %s", d.Host, d.Addr, d.Rule)
	}
	if d.Addr.IsValid() {
		return fmt.Sprintf("%s: %s", d.Addr, d.Rule)
	}
	return fmt.Sprintf("%s: %s", d.Host, d.Rule)
}

// Defaults for Proxy's limits.
const (
	DefaultMaxConns       = 128
	DefaultMaxHeaderBytes = 16 << 10
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultHeaderTimeout  = 30 * time.Second
	DefaultDialTimeout    = 30 * time.Second
)

// Proxy is one sandbox's egress proxy: it serves HTTP CONNECT, plain
// HTTP forwarding (one request per connection) and SOCKS5 CONNECT on
// the same listener, telling them apart by the first byte. It buffers
// at most a request's header; everything else is copied through.
type Proxy struct {
	Policy *Policy
	// Resolver resolves names (net.DefaultResolver when nil); the
	// proxy dials the very address it checked.
	Resolver Resolver
	// Dial connects to a checked address ("tcp", "IP:PORT"); a
	// net.Dialer's when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxConns bounds the client connections served at once; more wait
	// to be accepted.
	MaxConns int
	// MaxHeaderBytes bounds a request's header (HTTP) or handshake.
	MaxHeaderBytes int
	// IdleTimeout ends a connection when neither direction moved for
	// that long; HeaderTimeout bounds reading a request's header;
	// DialTimeout connecting upstream.
	IdleTimeout, HeaderTimeout, DialTimeout time.Duration
	// OnDeny, when set, is told of each refused connection, from the
	// connection's goroutine.
	OnDeny func(Denial)
	// Live, when set, is asked before each connection upstream and
	// before each write upstream: an error refuses the connection (503,
	// SOCKS general failure) or ends it, and nothing more goes out. The
	// agent answers with its lease on the job the sandbox works for: an
	// agent frozen (SIGSTOP, a stalled VM) while a request was in its
	// hands would otherwise send it when it runs again, after imsd may
	// have given the job to another agent.
	Live func() error
}

// ErrNotLive wraps Live's error: the proxy sends nothing more.
var ErrNotLive = errors.New("sending nothing more for this job")

// live asks Live.
func (p *Proxy) live() error {
	if p.Live == nil {
		return nil
	}
	if err := p.Live(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotLive, err)
	}
	return nil
}

func (p *Proxy) maxConns() int       { return def(p.MaxConns, DefaultMaxConns) }
func (p *Proxy) maxHeader() int      { return def(p.MaxHeaderBytes, DefaultMaxHeaderBytes) }
func (p *Proxy) idle() time.Duration { return def(p.IdleTimeout, DefaultIdleTimeout) }
func (p *Proxy) headerTimeout() time.Duration {
	return def(p.HeaderTimeout, DefaultHeaderTimeout)
}
func (p *Proxy) dialTimeout() time.Duration { return def(p.DialTimeout, DefaultDialTimeout) }

func def[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// Serve accepts connections from ln until ctx ends or ln fails, then
// closes ln and every connection it serves and returns once they are
// done.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	sem := make(chan struct{}, p.maxConns())
	var err error
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			<-sem
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors (the agent's, not the sandbox's):
				// wait for some to close rather than stop serving.
				select {
				case <-time.After(50 * time.Millisecond):
				case <-ctx.Done():
				}
				continue
			}
			break
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			<-sem
			break
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
				<-sem
			}()
			p.handle(ctx, c)
		})
	}
	cancel()
	wg.Wait()
	if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(p.headerTimeout()))
	lr := &io.LimitedReader{R: c, N: int64(p.maxHeader())}
	br := bufio.NewReaderSize(lr, 4096)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		p.socks(ctx, c, br, lr)
		return
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		status := http.StatusBadRequest
		if lr.N <= 0 {
			status = http.StatusRequestHeaderFieldsTooLarge
		}
		httpError(c, status, "byoc egress proxy: bad request")
		return
	}
	lr.N = math.MaxInt64 // the header is read; a body is copied through
	if req.Method == http.MethodConnect {
		up, err := p.dial(ctx, req.RequestURI)
		if err != nil {
			p.refuse(c, err)
			return
		}
		defer up.Close()
		_ = c.SetDeadline(time.Time{})
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		p.splice(c, br, up)
		return
	}
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		httpError(c, http.StatusBadRequest, "byoc egress proxy: want CONNECT or an absolute http:// URL")
		return
	}
	hostport := req.URL.Host
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		hostport = net.JoinHostPort(strings.Trim(hostport, "[]"), "80")
	}
	up, err := p.dial(ctx, hostport)
	if err != nil {
		p.refuse(c, err)
		return
	}
	defer up.Close()
	_ = c.SetDeadline(time.Time{})
	for _, h := range hopHeaders(req.Header) {
		req.Header.Del(h)
	}
	req.RequestURI = ""
	req.Close = true
	pair := &activity{}
	upc, cc := &idleConn{Conn: up, d: p.idle(), a: pair, live: p.live}, &idleConn{Conn: c, d: p.idle(), a: pair}
	sent := make(chan error, 1)
	go func() { sent <- req.Write(upc) }()
	_, _ = io.Copy(cc, upc)
	c.Close()
	up.Close()
	<-sent
}

// hopHeaders are the headers a proxy does not pass on.
func hopHeaders(h http.Header) []string {
	hs := []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade"}
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				hs = append(hs, f)
			}
		}
	}
	return hs
}

func httpError(c net.Conn, status int, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(msg)+1, msg)
}

// refuse answers a CONNECT or a request that could not be connected.
func (p *Proxy) refuse(c net.Conn, err error) {
	if errors.Is(err, ErrNotLive) {
		httpError(c, http.StatusServiceUnavailable, "byoc egress proxy: "+err.Error())
		return
	}
	if errors.Is(err, ErrDenied) {
		httpError(c, http.StatusForbidden, "byoc egress proxy: "+err.Error())
		return
	}
	httpError(c, http.StatusBadGateway, "byoc egress proxy: "+err.Error())
}

// dial resolves hostport, checks each address and connects to the first
// allowed one that answers. A refusal is reported to OnDeny and wraps
// ErrDenied.
func (p *Proxy) dial(ctx context.Context, hostport string) (net.Conn, error) {
	host, portS, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("bad destination %q: %v", hostport, err)
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("bad destination %q: port must be a number", hostport)
	}
	if err := p.live(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout())
	defer cancel()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		r := p.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("resolve %s: %v", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	var first *Denial
	var lastErr error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.WithZone("").Unmap(), uint16(port))
		if ok, rule := p.Policy.Check(netip.AddrPortFrom(a, uint16(port))); !ok {
			if first == nil {
				first = &Denial{Host: host, Addr: ap, Rule: rule}
			}
			continue
		}
		dial := p.Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		c, err := dial(ctx, "tcp", ap.String())
		if err == nil {
			if err := p.live(); err != nil {
				// Stopped (or out of lease) while connecting.
				c.Close()
				return nil, err
			}
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if p.OnDeny != nil {
		p.OnDeny(*first)
	}
	return nil, fmt.Errorf("connection to %s %w (%s)", first.Addr, ErrDenied, first.Rule)
}

// splice copies between client c (read through r) and upstream up until
// both directions end or neither moves for IdleTimeout.
func (p *Proxy) splice(c net.Conn, r io.Reader, up net.Conn) {
	pair := &activity{}
	d := p.idle()
	cc, upc := &idleConn{Conn: c, d: d, a: pair}, &idleConn{Conn: up, d: d, a: pair, live: p.live}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := io.Copy(upc, readerFunc(func(b []byte) (int, error) { return cc.readVia(r, b) }))
		if err != nil {
			c.Close()
			up.Close()
			return
		}
		closeWrite(up)
	}()
	_, err := io.Copy(cc, upc)
	if err != nil {
		c.Close()
		up.Close()
	} else {
		closeWrite(c)
	}
	<-done
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// activity is when a connection pair last moved bytes either way.
type activity struct{ last atomic.Int64 }

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// idleFor reports that nothing moved for d.
func (a *activity) idleFor(d time.Duration) bool {
	return time.Since(time.Unix(0, a.last.Load())) >= d
}

// idleConn is one side of a pair: a read that waits longer than d ends
// the connection only if the other direction did not move either, and a
// write that waits longer than d (the peer reads nothing) ends it.
type idleConn struct {
	net.Conn
	d time.Duration
	a *activity
	// live, on the upstream side, is asked before each write: an error
	// closes the connection unwritten.
	live func() error
}

func (c *idleConn) Read(b []byte) (int, error) { return c.readVia(c.Conn, b) }

// readVia reads from r, which reads from c's connection (through a
// buffer).
func (c *idleConn) readVia(r io.Reader, b []byte) (int, error) {
	c.a.last.CompareAndSwap(0, time.Now().UnixNano())
	for {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.d))
		n, err := r.Read(b)
		var ne net.Error
		if n == 0 && errors.As(err, &ne) && ne.Timeout() && !c.a.idleFor(c.d) {
			continue
		}
		if n > 0 {
			c.a.touch()
		}
		return n, err
	}
}

func (c *idleConn) Write(b []byte) (int, error) {
	if c.live != nil {
		if err := c.live(); err != nil {
			c.Conn.Close()
			return 0, err
		}
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.a.touch()
	}
	return n, err
}
