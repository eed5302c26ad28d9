// Package agentwire is imsd's own HTTP/2 server for agent stream
// connections: a connection whose first request is the agent stream
// (byoc.agent.v1.AgentService/Connect) in the Connect streaming protocol,
// as agentd sends it over h2c. It exists for memory: an idle agent
// connection costs one goroutine blocked in a read of a few bytes, and
// no buffers, where x/net/http2 and connect-go keep three goroutines and
// some 60 KiB.
//
// It serves exactly one stream per connection: the client is told
// MAX_CONCURRENT_STREAMS=1, any further request is refused with
// RST_STREAM(REFUSED_STREAM) (which Go's client retries on another
// connection), and the connection ends with GOAWAY when the stream does.
// Everything else about HTTP/2 a client may send is handled as RFC 9113
// says: SETTINGS, PING, WINDOW_UPDATE, PRIORITY, RST_STREAM, GOAWAY,
// padding, CONTINUATION, flow control in both directions, and connection
// errors (GOAWAY with the error's code) for what a client must not send.
//
// It answers the internet before any authentication, so what a client
// can make it read is bounded: a header block (decoded size, encoded
// bytes and CONTINUATION frames, against CVE-2023-45288), the stream's
// first message (FirstMessageMaxBytes, before and after gzip), and what a
// closing connection drains. A panic in a connection's goroutine is
// recovered, logged, counted (Panics) and ends that connection only.
//
// The connection's one goroutine reads the frames and runs the stream's
// handler. Sends go straight to the connection under a mutex, from
// whichever goroutine sends, in frames built in a pooled buffer and bounded
// by a write deadline; a sender out of flow-control window waits for a
// WINDOW_UPDATE, reading the connection itself when no one else is.
package agentwire

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Path is the agent stream's HTTP path.
const Path = "/byoc.agent.v1.AgentService/Connect"

// contentType is the Connect streaming protocol with protobuf messages.
const contentType = "application/connect+proto"

// Limits and defaults.
const (
	maxFrameSize      = 16 << 10 // what we accept (the default; not advertised)
	maxHeaderListSize = 16 << 10 // advertised; a larger header block is a connection error
	// A header block is bounded in frames and in encoded bytes as well as
	// in decoded size (CVE-2023-45288): CONTINUATION frames of no length,
	// or of HPACK that decodes to nothing, grow no header list, and
	// would otherwise be read until the connection's deadline. Go's and
	// curl's clients send a block in one HEADERS and, past the peer's
	// frame size, a CONTINUATION per 16 KiB; nghttp2 accepts 8
	// CONTINUATION frames by default. Past either bound the connection
	// ends with ENHANCE_YOUR_CALM (RFC 9113 §7: excessive load).
	maxContinuations    = 16
	maxHeaderBlockBytes = 2 * maxHeaderListSize
	// defaultFirstMessageMax bounds the stream's first message (see
	// Server.FirstMessageMaxBytes).
	defaultFirstMessageMax = 64 << 10
	// finishDiscardMax bounds what the end of a connection reads and
	// drops while it waits for the client to close (or the advertised
	// receive window, when larger: what the client may have in flight).
	finishDiscardMax = 64 << 10
	defaultWindow    = 65535 // RFC 9113 initial windows
	maxWindow        = 1<<31 - 1
	frameHeaderLen   = 9
	// sniffMax bounds the bytes Sniff reads before deciding.
	sniffMax = 16 << 10
)

// Handler runs one agent stream; ctx ends when the stream does. Its error
// is sent to the client as the Connect end-of-stream error.
type Handler func(ctx context.Context, st *Stream) error

// Server serves agent stream connections handed to it by ServeConn.
type Server struct {
	// Handler runs each stream.
	Handler Handler
	// ReadMaxBytes bounds a received message (after decompression).
	ReadMaxBytes int
	// FirstMessageMaxBytes bounds the stream's first message, on the wire
	// and after decompression (default 64 KiB, and never more than
	// ReadMaxBytes). It arrives before the handler has authenticated the
	// client (imsd's agent hello), so it is the largest message anyone
	// on the internet can make this server read and decompress.
	FirstMessageMaxBytes int
	// CompressMinBytes is the smallest message sent compressed, when the
	// client accepts gzip; 0 never compresses.
	CompressMinBytes int
	// WriteTimeout bounds every write, including a wait for flow-control
	// window (default 10s).
	WriteTimeout time.Duration
	// InitialWindowSize is the receive window advertised for the stream
	// and the connection (default 1 MiB).
	InitialWindowSize int
	// Log receives connection errors at debug level and contained
	// panics at error level (default: discarded).
	Log *slog.Logger

	// panics counts the panics contained to their connection.
	panics atomic.Uint64
	// testHookFrame, when set, runs before each frame is handled (tests
	// make it panic).
	testHookFrame func(typ byte)
	// testAnyRequest serves a connection's first request as the stream,
	// whatever it is (h2spec sends GET /).
	testAnyRequest bool

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	wg     sync.WaitGroup // connections being served
}

// Panics reports how many panics in a connection's goroutine (reading
// frames or running the handler) were contained to that connection.
func (s *Server) Panics() uint64 { return s.panics.Load() }

// Conns reports how many connections are being served.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// contain handles a panic recovered in a goroutine serving c: it is
// logged with its stack at error level, counted, and closes c; the
// process lives on.
func (s *Server) contain(c net.Conn, where string, r any) {
	s.panics.Add(1)
	if s.Log != nil {
		s.Log.Error("panic contained to its connection", "where", where, "remote", c.RemoteAddr().String(),
			"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	}
	c.Close()
}

func (s *Server) firstMessageMax() int {
	n := s.FirstMessageMaxBytes
	if n <= 0 {
		n = defaultFirstMessageMax
	}
	if s.ReadMaxBytes > 0 {
		n = min(n, s.ReadMaxBytes)
	}
	return n
}

func (s *Server) writeTimeout() time.Duration {
	if s.WriteTimeout > 0 {
		return s.WriteTimeout
	}
	return 10 * time.Second
}

func (s *Server) window() int {
	if s.InitialWindowSize > 0 {
		return min(s.InitialWindowSize, maxWindow)
	}
	return 1 << 20
}

func (s *Server) logDebug(msg string, args ...any) {
	if s.Log != nil {
		s.Log.Debug(msg, args...)
	}
}

// ServeConn starts serving c, whose client preface has been read and
// whose next bytes (buffered, from Sniff) are the client's first frames,
// on a goroutine of its own, and returns. The caller's goroutine ends: a
// fresh one starts at the bottom of its stack, so the idle connection's
// stack stays small enough to shrink to 4 KiB.
func (s *Server) ServeConn(c net.Conn, buffered []byte) {
	cn := &conn{srv: s, nc: c}
	cn.cond.L = &cn.wmu
	cn.sendConnWin = defaultWindow
	cn.sendStreamWin = defaultWindow
	cn.peerInitialWindow = defaultWindow
	cn.peerMaxFrame = 16 << 10
	cn.recvWindow = s.window()
	cn.recvConnWin = int64(cn.recvWindow)
	cn.recvStreamWin = int64(cn.recvWindow)
	if len(buffered) > 0 {
		b := readBufs.Get().(*[]byte)
		if len(buffered) > len(*b) {
			nb := make([]byte, len(buffered))
			b = &nb
		}
		cn.rbuf = b
		cn.w = copy(*b, buffered)
	}
	if !s.track(cn, true) {
		cn.closeNow()
		return
	}
	go cn.serve()
}

func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		s.wg.Done()
		return true
	}
	if s.closed {
		return false
	}
	s.wg.Add(1)
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

// Shutdown sends every connection a GOAWAY and closes it; their streams
// end as if the agents had gone away. It waits until their handlers have
// returned, or ctx ends. ServeConn refuses connections from then on.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway(errNo, "server shutting down")
		c.closeNow()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
