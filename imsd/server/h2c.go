package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/byoc-dev/byoc/imsd/agentwire"
)

// h2cPreface is what an HTTP/2 client with prior knowledge sends first.
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2cListener serves plaintext HTTP/2 (h2c with prior knowledge, which is
// how agents and the CLI speak to imsd without TLS) itself, through
// golang.org/x/net/http2's ServeConn, and hands every other connection to
// the http.Server through Accept.
//
// net/http can serve h2c by itself, but it recognises the preface only
// after it has allocated the connection's HTTP/1 read and write buffers,
// and keeps them, with the connection's HTTP/1 state, for as long as the
// connection lives: 8 KiB of heap per connection, the largest item of an
// idle agent's cost in imsd. Here the preface is read first; an HTTP/2
// connection never gets HTTP/1 buffers, and its serving goroutine starts
// with a shallower stack (docs/performance-connections.md, "The h2c sniff").
//
// x/net/http2's server is deprecated in favour of net/http's, which offers
// no way to serve a connection it has not read itself; from Go 1.27 on,
// x/net/http2 passes ServeConn to net/http's own HTTP/2 server, so this
// keeps working (and keeps net/http's implementation) when Go is upgraded.
type h2cListener struct {
	net.Listener
	srv *http.Server // HTTP/2 settings (HTTP2), handler, error log
	//lint:ignore SA1019 see the type's doc comment
	h2 *http2.Server
	// agent serves the connections whose first request is the agent
	// stream in the Connect protocol (nil: none, imsd --agentwire=off).
	agent *agentwire.Server
	// panics counts the panics contained to their connection in sniff;
	// log gets them, with their stack.
	panics *atomic.Uint64
	log    *slog.Logger
	// testHookSniff, when set, runs in sniff once the preface is read
	// (tests make it panic).
	testHookSniff func()

	conns chan net.Conn // HTTP/1 connections for srv's Accept
	done  chan struct{}
	once  sync.Once

	mu     sync.Mutex
	closed bool
	active map[net.Conn]struct{} // HTTP/2 connections being served
	err    error                 // from the underlying Accept
}

// h2cOptions are an h2cListener's collaborators.
type h2cOptions struct {
	agent  *agentwire.Server // nil: none (imsd --agentwire=off)
	panics *atomic.Uint64    // counts panics contained in sniff
	log    *slog.Logger
	// testHookSniff, when set, runs in sniff once the preface is read.
	testHookSniff func()
}

// prefaceTimeout bounds the wait for a new connection's first bytes, as
// ReadHeaderTimeout does for HTTP/1.
const prefaceTimeout = 10 * time.Second

// newH2CListener wraps ln for srv and starts accepting. srv must not use
// TLS. Its graceful shutdown (Shutdown) sends the HTTP/2 connections a
// GOAWAY; closeConns then ends those still open.
func newH2CListener(ln net.Listener, srv *http.Server, o h2cOptions) (*h2cListener, error) {
	//lint:ignore SA1019 see h2cListener's doc comment
	h2 := &http2.Server{}
	// Registers h2 for srv.Shutdown (GOAWAY); h2 takes the rest of its
	// settings from srv.HTTP2 at every connection.
	//lint:ignore SA1019 see h2cListener's doc comment
	if err := http2.ConfigureServer(srv, h2); err != nil {
		return nil, err
	}
	l := &h2cListener{
		Listener: ln, srv: srv, h2: h2, agent: o.agent, panics: o.panics, log: o.log, testHookSniff: o.testHookSniff,
		conns:  make(chan net.Conn),
		done:   make(chan struct{}),
		active: make(map[net.Conn]struct{}),
	}
	go l.acceptLoop()
	return l, nil
}

func (l *h2cListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond) // as net/http backs off
				continue
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.shut()
			return
		}
		go l.sniff(c)
	}
}

// sniff reads as much of the preface as the client sent and routes the
// connection: HTTP/2 is served here, anything else goes to srv with the
// bytes read put back in front. An HTTP/2 connection whose first request
// is the agent stream in the Connect protocol goes to the agent-wire
// server; the others to x/net/http2, with the frames read to find that
// out put back in front.
//
// A panic here (in agentwire.Sniff, say) ends this connection only.
func (l *h2cListener) sniff(c net.Conn) {
	defer l.contained(c)
	var buf [len(h2cPreface)]byte
	n := 0
	c.SetReadDeadline(time.Now().Add(prefaceTimeout))
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			c.Close()
			return
		}
		if !bytes.HasPrefix([]byte(h2cPreface), buf[:n]) {
			break // not HTTP/2: an HTTP/1 request may be shorter than the preface
		}
	}
	c.SetReadDeadline(time.Time{})
	if string(buf[:n]) != h2cPreface {
		select {
		case l.conns <- &prefixConn{Conn: c, prefix: bytes.NewReader(append([]byte(nil), buf[:n]...))}:
		case <-l.done:
			c.Close()
		}
		return
	}
	if !l.track(c, true) {
		c.Close()
		return
	}
	defer l.track(c, false)
	if l.testHookSniff != nil {
		l.testHookSniff()
	}
	var sc net.Conn = c
	if l.agent != nil {
		// A client sends its first request right after the preface; one
		// that opens a connection ahead of its requests (and perhaps waits
		// for our SETTINGS) is handed to x/net/http2 after firstRequestWait.
		raw, agent, err := agentwire.Sniff(c, time.Now().Add(firstRequestWait))
		var ne net.Error
		switch {
		case agent:
			l.agent.ServeConn(c, raw) // on a goroutine of its own, tracked by l.agent
			return
		case err != nil && !(errors.As(err, &ne) && ne.Timeout()):
			// Gone, or a CONTINUATION flood (agentwire.ErrHeaderFlood).
			c.Close()
			return
		}
		sc = &prefixConn{Conn: c, prefix: bytes.NewReader(append([]byte(h2cPreface), raw...))}
	}
	//lint:ignore SA1019 see h2cListener's doc comment
	l.h2.ServeConn(sc, &http2.ServeConnOpts{BaseConfig: l.srv, Handler: l.srv.Handler, SawClientPreface: l.agent == nil})
}

// contained recovers a panic in sniff (deferred directly, as recover
// requires): logged with its stack, counted in /metrics
// (byoc_agentwire_panics_total), and the connection closed.
func (l *h2cListener) contained(c net.Conn) {
	if r := recover(); r != nil {
		l.panics.Add(1)
		l.log.Error("panic contained to its connection", "where", "h2c sniff", "remote", c.RemoteAddr().String(),
			"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		c.Close()
	}
}

// firstRequestWait bounds the wait for an HTTP/2 client's first request
// when routing the connection.
const firstRequestWait = time.Second

// track adds or removes an HTTP/2 connection; adding fails once closed.
func (l *h2cListener) track(c net.Conn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !add {
		delete(l.active, c)
		return true
	}
	if l.closed {
		return false
	}
	l.active[c] = struct{}{}
	return true
}

// Accept returns the next connection that is not HTTP/2.
func (l *h2cListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting (http.Server's Shutdown and Close call it). The
// HTTP/2 connections being served stay open: see closeConns.
func (l *h2cListener) Close() error {
	l.shut()
	return l.Listener.Close()
}

func (l *h2cListener) shut() {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.done)
	})
}

// closeConns waits until the HTTP/2 connections have ended (after
// Shutdown's GOAWAY, those with requests in flight finish them) or ctx
// ends, then closes those still open: agent streams never end on their
// own.
func (l *h2cListener) closeConns(ctx context.Context) {
	if l.agent != nil {
		// Agent streams never end on their own: GOAWAY and close now.
		l.agent.Shutdown(ctx)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		l.mu.Lock()
		n := len(l.active)
		l.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			for c := range l.active {
				c.Close()
			}
			l.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	prefix *bytes.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.prefix != nil {
		n, _ := c.prefix.Read(p)
		if c.prefix.Len() == 0 {
			c.prefix = nil // the connection may live for days: let the bytes go
		}
		if n > 0 {
			return n, nil
		}
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close the connection as it does a TCP one.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

var _ io.Reader = (*prefixConn)(nil)
