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
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
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
	// drops while it waits for the client to close.
	finishDiscardMax = 64 << 10
	defaultWindow    = 65535 // RFC 9113 initial windows
	maxWindow        = 1<<31 - 1
	frameHeaderLen   = 9
	// sniffMax bounds the bytes Sniff reads before deciding.
	sniffMax = 16 << 10
)

// HTTP/2 frame types.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// SETTINGS parameters.
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
)

// HTTP/2 error codes.
const (
	errNo             = 0x0
	errProtocol       = 0x1
	errInternal       = 0x2
	errFlowControl    = 0x3
	errStreamClosed   = 0x5
	errFrameSize      = 0x6
	errRefusedStream  = 0x7
	errCancel         = 0x8
	errCompression    = 0x9
	errEnhanceYourCal = 0xb
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

// Sniff reads a new h2c connection's frames after the client preface, up
// to the end of the client's first header block, within deadline. agent
// reports whether that request is the agent stream in the Connect
// protocol, which this package serves; raw is every byte read, to be
// replayed to another server or given to ServeConn. Sniff keeps nothing,
// reads at most 16 KiB, and fails with ErrHeaderFlood on a header block
// of more CONTINUATION frames than a client sends.
func Sniff(c net.Conn, deadline time.Time) (raw []byte, agent bool, err error) {
	c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 0, 1024)
	var dec *hpack.Decoder
	var h requestHeaders
	off := 0 // start of the next unparsed frame
	inBlock := false
	continuations := 0
	for {
		// Parse what is buffered.
		for len(buf)-off >= frameHeaderLen {
			length, typ, flags, _ := parseFrameHeader(buf[off:])
			if length > maxFrameSize {
				return buf, false, nil // let the standard server say so
			}
			if len(buf)-off < frameHeaderLen+int(length) {
				break
			}
			payload := buf[off+frameHeaderLen : off+frameHeaderLen+int(length)]
			off += frameHeaderLen + int(length)
			switch {
			case typ == frameHeaders && !inBlock:
				frag, ok := headerFragment(payload, flags)
				if !ok {
					return buf, false, nil
				}
				h.endStream = flags&flagEndStream != 0
				dec = hpack.NewDecoder(4096, h.emit)
				dec.SetMaxStringLength(maxHeaderListSize)
				if _, err := dec.Write(frag); err != nil {
					return buf, false, nil
				}
				inBlock = true
			case typ == frameContinuation && inBlock:
				if continuations++; continuations > maxContinuations {
					return buf, false, ErrHeaderFlood
				}
				if _, err := dec.Write(payload); err != nil {
					return buf, false, nil
				}
			case inBlock:
				return buf, false, nil // anything else inside a header block
			default:
				continue // SETTINGS, WINDOW_UPDATE, PRIORITY... before the request
			}
			if flags&flagEndHeaders != 0 {
				if dec.Close() != nil {
					return buf, false, nil
				}
				return buf, h.isAgentStream(), nil
			}
		}
		if len(buf) >= sniffMax {
			return buf, false, nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):min(cap(buf), sniffMax)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, false, err
		}
	}
}

// ErrHeaderFlood is Sniff's error for a first header block of more
// CONTINUATION frames than any client sends: the connection is an attack
// (CVE-2023-45288), to be closed rather than served.
var ErrHeaderFlood = errors.New("agentwire: header block of too many CONTINUATION frames")

// requestHeaders is what routing and serving look at in a request.
type requestHeaders struct {
	method, path, contentType string
	encoding, acceptEncoding  string
	timeout                   bool
	endStream, bad            bool
	size                      int
	pseudoDone                bool
}

func (h *requestHeaders) emit(f hpack.HeaderField) {
	h.size += len(f.Name) + len(f.Value) + 32
	if strings.HasPrefix(f.Name, ":") {
		if h.pseudoDone {
			h.bad = true
		}
	} else {
		h.pseudoDone = true
	}
	switch f.Name {
	case ":method":
		h.method = f.Value
	case ":path":
		h.path = f.Value
	case "content-type":
		h.contentType = f.Value
	case "connect-content-encoding":
		h.encoding = f.Value
	case "connect-accept-encoding":
		h.acceptEncoding = f.Value
	case "connect-timeout-ms":
		h.timeout = true
	}
}

// isAgentStream reports whether this package serves the request: the agent
// stream, in the Connect protocol with protobuf, without a deadline (which
// connect-go's handler honours and this server does not), compressed with
// gzip if at all.
func (h *requestHeaders) isAgentStream() bool {
	return !h.bad && h.size <= maxHeaderListSize && !h.endStream && !h.timeout &&
		h.method == "POST" && h.path == Path && strings.EqualFold(h.contentType, contentType) &&
		(h.encoding == "" || h.encoding == "identity" || h.encoding == "gzip")
}

// acceptsGzip reports whether the client's connect-accept-encoding lists gzip.
func (h *requestHeaders) acceptsGzip() bool {
	for e := range strings.SplitSeq(h.acceptEncoding, ",") {
		if strings.TrimSpace(e) == "gzip" {
			return true
		}
	}
	return false
}

func parseFrameHeader(b []byte) (length uint32, typ, flags byte, stream uint32) {
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]), b[3], b[4], binary.BigEndian.Uint32(b[5:9]) & (1<<31 - 1)
}

func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// headerFragment strips a HEADERS frame's padding and priority fields.
func headerFragment(p []byte, flags byte) ([]byte, bool) {
	p, ok := unpad(p, flags)
	if !ok {
		return nil, false
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, false
		}
		p = p[5:]
	}
	return p, true
}

func unpad(p []byte, flags byte) ([]byte, bool) {
	if flags&flagPadded == 0 {
		return p, true
	}
	if len(p) < 1 || int(p[0]) >= len(p) {
		return nil, false
	}
	return p[1 : len(p)-int(p[0])], true
}

// Pools: frame read buffers (one frame at most), message and write
// buffers, gzip readers and writers.
var (
	readBufs  = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	msgBufs   = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}
	gzWriters sync.Pool
	gzReaders sync.Pool
)

const maxPooled = 64 << 10

func getBuf() *[]byte { return msgBufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooled {
		*b = (*b)[:0]
		msgBufs.Put(b)
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

// connError is an HTTP/2 connection error.
type connError struct {
	code uint32
	msg  string
}

func (e *connError) Error() string {
	return fmt.Sprintf("http2 connection error %d: %s", e.code, e.msg)
}

func protoErr(format string, args ...any) error {
	return &connError{errProtocol, fmt.Sprintf(format, args...)}
}

// conn is one agent connection.
type conn struct {
	srv *Server
	nc  net.Conn

	// Read side: held by whoever reads frames (rmu), normally the
	// handler's goroutine in Receive, else a sender waiting for window.
	rmu  sync.Mutex
	tiny [16]byte       // an idle connection's read buffer
	rbuf *[]byte        // pooled, while a frame is partly read
	r, w int            // unparsed bytes are (*rbuf)[r:w]
	dec  *hpack.Decoder // nil when idle once tableZero
	// tableZero: the client acknowledged our HEADER_TABLE_SIZE of 0.
	tableZero bool
	hdr       requestHeaders
	// blockStream is the stream of a header block in progress (0: none);
	// blockFrames and blockBytes count its CONTINUATION frames and its
	// encoded bytes so far.
	// (Sized and placed to keep conn in its allocation size class.)
	blockStream                uint32
	blockBytes                 uint32
	lastStream                 uint32 // highest stream id the client opened
	stream                     uint32 // the agent stream's id (0 before its HEADERS)
	blockFrames                uint16
	gotFirst                   bool    // the stream's first message was received
	in                         *[]byte // received message bytes not yet returned (pooled)
	unacked                    int64   // bytes received and consumed but not yet credited
	credited                   int64   // bytes at the front of c.in already credited
	recvWindow                 int     // advertised initial window
	recvConnWin, recvStreamWin int64
	halfClosed                 bool  // the client ended its side of the stream
	rerr                       error // why reading stopped (sticky)
	gzipIn                     bool  // the client compresses (connect-content-encoding: gzip)

	// Write side.
	wmu               sync.Mutex
	cond              sync.Cond // on wmu: window grew, reader changed, or failure
	werr              error     // sticky: nothing more can be written
	goneAway          bool      // a GOAWAY was sent
	goneAwayErr       bool      // a GOAWAY with an error code was sent
	goAwayStream      uint32    // the last stream id GOAWAY names: the agent stream's
	sendConnWin       int64
	sendStreamWin     int64
	peerInitialWindow int64
	peerMaxFrame      int
	headersSent       bool
	ended             bool // END_STREAM sent
	gzipOut           bool // the client accepts gzip
	reset             bool // the stream was reset by the client
	done              bool // reading stopped: the stream cannot go on
	// corked: writes gather in pending (a pooled buffer) instead of
	// going out one by one. Receive corks the connection when it hands
	// the handler a message and uncorks it before it next waits for the
	// client, so the answers to messages that arrived together (an
	// agent's ack and result) leave in one write.
	corked  bool
	pending *[]byte

	smu sync.Mutex // one message at a time

	cancel context.CancelFunc
}

// serve runs the connection: our SETTINGS, the client's first frames,
// the stream's handler, then the end of the connection.
//
// While the stream is idle, its goroutine's stack holds serve, the
// handler, Receive and the network read: keep their frames small (a
// stack whose used part is under 1248 bytes shrinks to 4 KiB; see
// runtime.shrinkstack). The connection's setup and end are in functions
// of their own for that reason. (docs/performance.md, "The idle stack",
// has the figures.)
func (c *conn) serve() {
	defer c.srv.track(c, false)
	defer c.contained()
	if !c.start() {
		c.finishConn()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	herr := c.srv.Handler(ctx, &Stream{c: c})
	cancel()
	c.endStream(herr)
	c.finishConn()
}

// start sends our SETTINGS and reads up to the agent stream's headers.
//
//go:noinline
func (c *conn) start() bool {
	var b []byte
	b = appendFrameHeader(b, 4*6, frameSettings, 0, 0)
	b = appendSetting(b, settingMaxConcurrentStreams, 1)
	// No dynamic table for the client's later header blocks: once it has
	// acknowledged this, the decoder (and the entries its first block
	// added) can go.
	b = appendSetting(b, settingHeaderTableSize, 0)
	b = appendSetting(b, settingInitialWindowSize, uint32(c.recvWindow))
	b = appendSetting(b, settingMaxHeaderListSize, maxHeaderListSize)
	if inc := c.recvWindow - defaultWindow; inc > 0 {
		b = appendFrameHeader(b, 4, frameWindowUpdate, 0, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(inc))
	}
	c.wmu.Lock()
	err := c.writeLocked(b)
	c.wmu.Unlock()
	if err != nil {
		return false
	}
	// Read up to the agent stream's header block.
	c.rmu.Lock()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for c.stream == 0 && c.rerr == nil {
		if c.step() != nil {
			break
		}
	}
	c.rmu.Unlock()
	if c.rerr != nil || c.stream == 0 {
		return false
	}
	// No other stream will be served here: a graceful GOAWAY now makes a
	// client take a new connection for its next request (Go's marks this
	// one dead at once), instead of racing the GOAWAY sent at the end.
	c.goAway(errNo, "")
	return true
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, id)
	return binary.BigEndian.AppendUint32(b, v)
}

// finishConn ends the connection: a GOAWAY, then a short wait for the
// client to read what was sent and close, so that our last frames are
// not lost to a reset.
func (c *conn) finishConn() {
	code := uint32(errNo)
	var ce *connError
	if errors.As(c.rerr, &ce) {
		code = ce.code
	}
	c.goAway(code, "")
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.rmu.Lock()
	c.nc.SetReadDeadline(time.Now().Add(time.Second))
	// Bounded in bytes too: a flooding client gets no more reads.
	var discard [512]byte
	for n := 0; n < finishDiscardMax; {
		m, err := c.nc.Read(discard[:])
		if err != nil {
			break
		}
		n += m
	}
	c.releaseRead()
	c.rmu.Unlock()
	c.closeNow()
}

// contained recovers a panic in the connection's goroutine (reading
// frames or in the handler) and ends the connection, not the process. It
// takes no lock: the panic may have left one held.
func (c *conn) contained() {
	if r := recover(); r != nil {
		c.srv.contain(c.nc, "agentwire connection", r)
		if c.cancel != nil {
			c.cancel()
		}
	}
}

func (c *conn) closeNow() {
	c.wmu.Lock()
	if c.werr == nil {
		c.werr = net.ErrClosed
	}
	c.cond.Broadcast()
	c.wmu.Unlock()
	c.nc.Close()
}

// goAway sends a GOAWAY: a graceful one once, then at most one with an
// error code.
func (c *conn) goAway(code uint32, debug string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil || c.goneAwayErr || code == errNo && c.goneAway {
		return
	}
	c.corked = false
	c.flushLocked()
	c.goneAway = true
	c.goneAwayErr = code != errNo
	b := appendFrameHeader(nil, 8+len(debug), frameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, c.goAwayStream)
	b = binary.BigEndian.AppendUint32(b, code)
	b = append(b, debug...)
	c.writeLocked(b)
}

// writeLocked writes b with the write deadline, or adds it to what a
// corked connection has pending; a failure is sticky and closes the
// connection, which ends the reader's wait. c.wmu is held.
func (c *conn) writeLocked(b []byte) error {
	if c.werr != nil {
		return c.werr
	}
	if c.corked {
		if c.pending == nil {
			c.pending = getBuf()
			*c.pending = (*c.pending)[:0]
		}
		*c.pending = append(*c.pending, b...)
		return nil
	}
	return c.writeNow(b)
}

// flushLocked writes what is pending; c.wmu is held.
func (c *conn) flushLocked() error {
	if c.pending == nil {
		return c.werr
	}
	p := c.pending
	c.pending = nil
	defer putBuf(p)
	if c.werr != nil {
		return c.werr
	}
	return c.writeNow(*p)
}

// cork starts gathering writes; uncork writes what gathered and stops.
func (c *conn) cork() {
	c.wmu.Lock()
	c.corked = true
	c.wmu.Unlock()
}

func (c *conn) uncork() {
	c.wmu.Lock()
	c.corked = false
	c.flushLocked()
	c.wmu.Unlock()
}

// writeNow writes b to the connection; c.wmu is held.
func (c *conn) writeNow(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.srv.writeTimeout()))
	if _, err := c.nc.Write(b); err != nil {
		c.werr = err
		c.cond.Broadcast()
		c.nc.Close()
		return err
	}
	return nil
}

// control writes a small control frame.
func (c *conn) control(typ, flags byte, stream uint32, payload []byte) {
	var a [frameHeaderLen + 8]byte
	b := appendFrameHeader(a[:0], len(payload), typ, flags, stream)
	b = append(b, payload...)
	c.wmu.Lock()
	c.writeLocked(b)
	c.wmu.Unlock()
}

// resetStream ends the agent stream with a stream error: RST_STREAM with
// code, and the handler's Receive fails with msg.
func (c *conn) resetStream(code uint32, msg string) {
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], code)
	c.control(frameRSTStream, 0, c.stream, a[:])
	c.wmu.Lock()
	c.reset = true
	c.wmu.Unlock()
	if c.rerr == nil {
		c.rerr = connect.NewError(connect.CodeInternal, fmt.Errorf("http2 stream error %d: %s", code, msg))
	}
	c.setDone()
}

// fail records a connection error found while reading and tells the client.
func (c *conn) fail(err error) {
	if c.rerr == nil {
		c.rerr = err
	}
	var ce *connError
	if errors.As(err, &ce) {
		c.srv.logDebug("agentwire: connection error", "remote", c.nc.RemoteAddr().String(), "err", err)
		c.goAway(ce.code, ce.msg)
	}
	c.setDone()
}

// setDone marks the stream as unable to go on, for waiting senders, and
// ends the handler's context.
func (c *conn) setDone() {
	c.wmu.Lock()
	c.done = true
	c.cond.Broadcast()
	c.wmu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// fill makes n bytes available at (*c.rbuf)[c.r:]. With nothing buffered
// it waits in a read of c.tiny, then takes a pooled buffer.
func (c *conn) fill(n int) error {
	for c.w-c.r < n {
		if c.rbuf == nil {
			if err := c.await(); err != nil {
				return err
			}
			continue
		}
		buf := *c.rbuf
		if n > len(buf) {
			return &connError{errFrameSize, "frame too large"}
		}
		if c.r > 0 && len(buf)-c.r < n {
			c.w = copy(buf, buf[c.r:c.w])
			c.r = 0
		}
		m, err := c.nc.Read(buf[c.w:])
		c.w += m
		if err != nil && c.w-c.r < n {
			return err
		}
	}
	return nil
}

// frameBuffered reports whether a whole frame is buffered, so that step
// need not read; rmu is held.
func (c *conn) frameBuffered() bool {
	if c.rbuf == nil || c.w-c.r < frameHeaderLen {
		return false
	}
	length, _, _, _ := parseFrameHeader((*c.rbuf)[c.r:])
	return c.w-c.r >= frameHeaderLen+int(length)
}

// releaseRead gives the read buffer back when no partial frame is left.
func (c *conn) releaseRead() {
	if c.rbuf != nil && c.r == c.w {
		if len(*c.rbuf) == 32<<10 {
			readBufs.Put(c.rbuf)
		}
		c.rbuf = nil
		c.r, c.w = 0, 0
	}
}

// step reads and handles one frame; rmu is held. Errors are recorded in c.rerr, except a read deadline passing, which
// step returns.
func (c *conn) step() error {
	if c.rerr != nil {
		return c.rerr
	}
	if err := c.fill(frameHeaderLen); err != nil {
		return c.readFailed(err)
	}
	length, typ, flags, sid := parseFrameHeader((*c.rbuf)[c.r:])
	if length > maxFrameSize {
		c.fail(&connError{errFrameSize, fmt.Sprintf("frame of %d bytes exceeds %d", length, maxFrameSize)})
		return c.rerr
	}
	if err := c.fill(frameHeaderLen + int(length)); err != nil {
		return c.readFailed(err)
	}
	p := (*c.rbuf)[c.r+frameHeaderLen : c.r+frameHeaderLen+int(length)]
	if c.srv.testHookFrame != nil {
		c.srv.testHookFrame(typ)
	}
	err := c.frame(typ, flags, sid, p)
	c.r += frameHeaderLen + int(length)
	c.releaseRead()
	if err != nil {
		c.fail(err)
		return c.rerr
	}
	return nil
}

func (c *conn) readFailed(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	c.fail(fmt.Errorf("agent connection: %w", io.EOF))
	c.srv.logDebug("agentwire: read", "remote", c.nc.RemoteAddr().String(), "err", err)
	return c.rerr
}

// frame handles one frame.
func (c *conn) frame(typ, flags byte, sid uint32, p []byte) error {
	if c.blockStream != 0 && typ != frameContinuation {
		return protoErr("frame type %d inside a header block", typ)
	}
	switch typ {
	case frameSettings:
		return c.settings(flags, sid, p)
	case framePing:
		if sid != 0 {
			return protoErr("PING on stream %d", sid)
		}
		if len(p) != 8 {
			return &connError{errFrameSize, "PING of other than 8 bytes"}
		}
		if flags&flagAck == 0 {
			c.control(framePing, flagAck, 0, p)
		}
	case frameWindowUpdate:
		if len(p) != 4 {
			return &connError{errFrameSize, "WINDOW_UPDATE of other than 4 bytes"}
		}
		inc := int64(binary.BigEndian.Uint32(p) & (1<<31 - 1))
		if sid != 0 && sid != c.stream {
			if sid > c.lastStream {
				return protoErr("WINDOW_UPDATE on idle stream %d", sid)
			}
			return nil // a closed stream
		}
		if inc == 0 {
			return protoErr("WINDOW_UPDATE of 0")
		}
		c.wmu.Lock()
		w := &c.sendConnWin
		if sid != 0 {
			w = &c.sendStreamWin
		}
		*w += inc
		over := *w > maxWindow
		c.cond.Broadcast()
		c.wmu.Unlock()
		if over && sid != 0 {
			// A stream error: the stream ends with RST_STREAM, the
			// connection (which serves no other) gracefully after it.
			c.resetStream(errFlowControl, "stream window above 2^31-1")
			return nil
		}
		if over {
			return &connError{errFlowControl, "window above 2^31-1"}
		}
	case frameHeaders:
		return c.headers(flags, sid, p)
	case frameContinuation:
		if c.blockStream == 0 || sid != c.blockStream {
			return protoErr("CONTINUATION without a header block")
		}
		c.blockFrames++
		c.blockBytes += uint32(len(p))
		if c.blockFrames > maxContinuations {
			return &connError{errEnhanceYourCal, fmt.Sprintf("header block of more than %d CONTINUATION frames", maxContinuations)}
		}
		if c.blockBytes > maxHeaderBlockBytes {
			return &connError{errEnhanceYourCal, fmt.Sprintf("header block over %d bytes", maxHeaderBlockBytes)}
		}
		return c.headerBlock(p, flags&flagEndHeaders != 0)
	case frameData:
		return c.data(flags, sid, p)
	case frameRSTStream:
		if sid == 0 {
			return protoErr("RST_STREAM on stream 0")
		}
		if len(p) != 4 {
			return &connError{errFrameSize, "RST_STREAM of other than 4 bytes"}
		}
		if sid > c.lastStream {
			return protoErr("RST_STREAM on idle stream %d", sid)
		}
		if sid == c.stream {
			c.wmu.Lock()
			c.reset = true
			c.wmu.Unlock()
			if c.rerr == nil {
				c.rerr = connect.NewError(connect.CodeCanceled, fmt.Errorf("stream reset by the client (code %d)", binary.BigEndian.Uint32(p)))
			}
			c.setDone()
		}
	case frameGoAway:
		if sid != 0 {
			return protoErr("GOAWAY on stream %d", sid)
		}
		if len(p) < 8 {
			return &connError{errFrameSize, "GOAWAY of fewer than 8 bytes"}
		}
		last, code := binary.BigEndian.Uint32(p)&(1<<31-1), binary.BigEndian.Uint32(p[4:])
		// A graceful GOAWAY that covers the stream lets it go on (RFC
		// 9113 §6.8); any other ends it.
		if code != errNo || c.stream == 0 || last < c.stream {
			if c.rerr == nil {
				c.rerr = fmt.Errorf("GOAWAY from the client (code %d): %w", code, io.EOF)
			}
			c.setDone()
		}
	case framePriority:
		if sid == 0 {
			return protoErr("PRIORITY on stream 0")
		}
		if len(p) != 5 {
			return &connError{errFrameSize, "PRIORITY of other than 5 bytes"}
		}
		if binary.BigEndian.Uint32(p)&(1<<31-1) == sid {
			// A stream error (RFC 9113 §5.3.1), which ends the connection's
			// one stream, and so the connection.
			return protoErr("stream %d depends on itself", sid)
		}
	case framePushPromise:
		return protoErr("PUSH_PROMISE from a client")
	}
	return nil // unknown frame types are ignored
}

func (c *conn) settings(flags byte, sid uint32, p []byte) error {
	if sid != 0 {
		return protoErr("SETTINGS on stream %d", sid)
	}
	if flags&flagAck != 0 {
		if len(p) != 0 {
			return &connError{errFrameSize, "SETTINGS ACK with a payload"}
		}
		// Every header block the client encodes from now on starts by
		// emptying its dynamic table (RFC 7541 §4.2): the decoder's table
		// is of no further use.
		c.tableZero = true
		if c.blockStream == 0 {
			c.dec = nil
		}
		return nil
	}
	if len(p)%6 != 0 {
		return &connError{errFrameSize, "SETTINGS of a length not a multiple of 6"}
	}
	c.wmu.Lock()
	for ; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), binary.BigEndian.Uint32(p[2:])
		switch id {
		case settingEnablePush:
			if v > 1 {
				c.wmu.Unlock()
				return protoErr("ENABLE_PUSH of %d", v)
			}
		case settingInitialWindowSize:
			if v > maxWindow {
				c.wmu.Unlock()
				return &connError{errFlowControl, "INITIAL_WINDOW_SIZE above 2^31-1"}
			}
			c.sendStreamWin += int64(v) - c.peerInitialWindow
			c.peerInitialWindow = int64(v)
			if c.sendStreamWin > maxWindow {
				c.wmu.Unlock()
				return &connError{errFlowControl, "window above 2^31-1"}
			}
		case settingMaxFrameSize:
			if v < 16<<10 || v > 1<<24-1 {
				c.wmu.Unlock()
				return protoErr("MAX_FRAME_SIZE of %d", v)
			}
			c.peerMaxFrame = int(v)
		}
		// HEADER_TABLE_SIZE needs nothing: our header blocks never index.
	}
	c.cond.Broadcast()
	var a [frameHeaderLen]byte
	c.writeLocked(appendFrameHeader(a[:0], 0, frameSettings, flagAck, 0))
	c.wmu.Unlock()
	return nil
}

func (c *conn) headers(flags byte, sid uint32, p []byte) error {
	if sid == 0 || sid%2 == 0 {
		return protoErr("HEADERS on stream %d", sid)
	}
	frag, ok := headerFragment(p, flags)
	if !ok {
		return protoErr("HEADERS padding or priority malformed")
	}
	if flags&flagPriority != 0 {
		if q, _ := unpad(p, flags); binary.BigEndian.Uint32(q)&(1<<31-1) == sid {
			return protoErr("stream %d depends on itself", sid)
		}
	}
	if sid == c.stream && c.stream != 0 {
		// Trailers: the client's half of the stream ends.
		if flags&flagEndStream == 0 {
			return protoErr("HEADERS on an open stream without END_STREAM")
		}
		c.halfClosed = true
	} else if sid <= c.lastStream {
		return &connError{errStreamClosed, fmt.Sprintf("HEADERS on closed stream %d", sid)}
	} else {
		c.lastStream = sid
	}
	if c.dec == nil {
		c.dec = hpack.NewDecoder(4096, nil)
		c.dec.SetMaxStringLength(maxHeaderListSize)
		if c.tableZero {
			c.dec.SetAllowedMaxDynamicTableSize(0)
		}
	}
	c.hdr = requestHeaders{endStream: flags&flagEndStream != 0}
	c.dec.SetEmitFunc(c.hdr.emit)
	c.blockStream = sid
	c.blockFrames, c.blockBytes = 0, uint32(len(p))
	return c.headerBlock(frag, flags&flagEndHeaders != 0)
}

func (c *conn) headerBlock(frag []byte, end bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return &connError{errCompression, err.Error()}
	}
	if c.hdr.size > maxHeaderListSize {
		return &connError{errEnhanceYourCal, "header list too large"}
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return &connError{errCompression, err.Error()}
	}
	sid := c.blockStream
	c.blockStream = 0
	c.dec.SetEmitFunc(func(hpack.HeaderField) {})
	if c.tableZero {
		c.dec = nil
	}
	if sid == c.stream && c.stream != 0 {
		return nil // trailers
	}
	if c.stream == 0 && (c.hdr.isAgentStream() || c.srv.testAnyRequest) {
		c.stream = sid
		c.halfClosed = c.hdr.endStream // only where testAnyRequest lets one in
		c.gzipIn = c.hdr.encoding == "gzip"
		c.wmu.Lock()
		c.gzipOut = c.srv.CompressMinBytes > 0 && c.hdr.acceptsGzip()
		c.sendStreamWin = c.peerInitialWindow
		c.goAwayStream = sid
		c.wmu.Unlock()
		c.hdr = requestHeaders{}
		return nil
	}
	// One stream per connection: the client retries elsewhere.
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], errRefusedStream)
	c.control(frameRSTStream, 0, sid, a[:])
	if c.stream == 0 {
		return protoErr("the first request is not the agent stream")
	}
	return nil
}

func (c *conn) data(flags byte, sid uint32, p []byte) error {
	if sid == 0 {
		return protoErr("DATA on stream 0")
	}
	if sid > c.lastStream {
		return protoErr("DATA on idle stream %d", sid)
	}
	n := int64(len(p))
	if n > c.recvConnWin {
		return &connError{errFlowControl, "DATA beyond the connection window"}
	}
	c.recvConnWin -= n
	if sid != c.stream {
		// A refused stream's DATA sent before the client saw our
		// RST_STREAM: discarded, and the connection window given back.
		c.credit(n, false)
		return nil
	}
	if c.halfClosed {
		return &connError{errStreamClosed, "DATA after END_STREAM"}
	}
	if n > c.recvStreamWin {
		return &connError{errFlowControl, "DATA beyond the stream window"}
	}
	c.recvStreamWin -= n
	body, ok := unpad(p, flags)
	if !ok {
		return protoErr("DATA padding malformed")
	}
	if len(body) > 0 {
		if c.in == nil {
			c.in = getBuf()
		}
		*c.in = append(*c.in, body...)
	}
	// Padding is consumed at once; the body when Receive takes it.
	c.unacked += n - int64(len(body))
	if flags&flagEndStream != 0 {
		c.halfClosed = true
	}
	return nil
}

// credit gives consumed bytes back to the client's send windows, in
// WINDOW_UPDATEs once half a window has been consumed.
func (c *conn) credit(n int64, stream bool) {
	if !stream {
		c.recvConnWin += n
		if inc := int64(c.recvWindow) - c.recvConnWin; inc >= int64(c.recvWindow)/2 {
			c.recvConnWin += inc
			var a [4]byte
			binary.BigEndian.PutUint32(a[:], uint32(inc))
			c.control(frameWindowUpdate, 0, 0, a[:])
		}
		return
	}
	c.unacked += n
	if c.unacked < int64(c.recvWindow)/2 {
		return
	}
	inc := c.unacked
	c.unacked = 0
	c.recvConnWin += inc
	c.recvStreamWin += inc
	var b [2 * (frameHeaderLen + 4)]byte
	w := appendFrameHeader(b[:0], 4, frameWindowUpdate, 0, 0)
	w = binary.BigEndian.AppendUint32(w, uint32(inc))
	if !c.halfClosed {
		w = appendFrameHeader(w, 4, frameWindowUpdate, 0, c.stream)
		w = binary.BigEndian.AppendUint32(w, uint32(inc))
	}
	c.wmu.Lock()
	c.writeLocked(w)
	c.wmu.Unlock()
}

// Stream is the agent stream of one connection. Receive must be called
// from one goroutine at a time, and Send from one at a time.
type Stream struct {
	c *conn
}

// Receive returns the next message. With limit > 0, a wait of more than
// limit ends in an error matching os.ErrDeadlineExceeded.
func (st *Stream) Receive(limit time.Duration) (*agentv1.ConnectRequest, error) {
	c := st.c
	c.rmu.Lock()
	defer func() {
		c.releaseRead()
		c.rmu.Unlock()
		c.wmu.Lock()
		c.cond.Broadcast() // a sender waiting for window may read now
		c.wmu.Unlock()
	}()
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	c.nc.SetReadDeadline(deadline)
	for {
		if m, err := c.message(); m != nil || err != nil {
			if m != nil {
				// Answers wait for the next Receive, or the stream's end.
				c.cork()
			}
			return m, err
		}
		if c.rerr != nil {
			return nil, c.rerr
		}
		if c.halfClosed {
			if c.in != nil && len(*c.in) > 0 {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("protocol error: incomplete envelope: unexpected EOF"))
			}
			return nil, io.EOF
		}
		// What is buffered is a partial message: credit it as consumed,
		// or a message larger than the window would never arrive.
		if c.in != nil && int64(len(*c.in)) > c.credited {
			c.credit(int64(len(*c.in))-c.credited, true)
			c.credited = int64(len(*c.in))
		}
		if !c.frameBuffered() {
			// About to wait for the client: send what is pending first.
			c.uncork()
		}
		if c.rbuf == nil {
			// Idle: wait here, not deeper in step, for a shallow stack.
			if err := c.await(); err != nil {
				return nil, c.readFailed(err)
			}
			continue
		}
		if err := c.step(); err != nil {
			return nil, err
		}
	}
}

// await waits for bytes with nothing buffered, reading into c.tiny, and
// then takes a pooled buffer for them.
func (c *conn) await() error {
	n, err := c.nc.Read(c.tiny[:])
	if n == 0 {
		return err
	}
	c.rbuf = readBufs.Get().(*[]byte)
	c.r, c.w = 0, copy(*c.rbuf, c.tiny[:n])
	return nil
}

// message takes a whole message out of c.in, if there is one.
func (c *conn) message() (*agentv1.ConnectRequest, error) {
	if c.in == nil || len(*c.in) < 5 {
		return nil, nil
	}
	b := *c.in
	flags, size := b[0], int(binary.BigEndian.Uint32(b[1:5]))
	limit, what := c.srv.ReadMaxBytes, "message"
	if !c.gotFirst {
		// Before the handler has authenticated the client.
		limit, what = c.srv.firstMessageMax(), "first message"
	}
	if limit > 0 && size > limit {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s size %d is larger than configured max %d", what, size, limit))
	}
	if len(b) < 5+size {
		return nil, nil
	}
	payload := b[5 : 5+size]
	var err error
	if flags&0x01 != 0 {
		if !c.gzipIn {
			return nil, connect.NewError(connect.CodeInternal, errors.New("protocol error: sent compressed message without compression support"))
		}
		payload, err = gunzip(payload, limit, what)
	} else if flags != 0 {
		err = connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("protocol error: invalid envelope flags %d", flags))
	}
	c.gotFirst = true
	var m *agentv1.ConnectRequest
	if err == nil {
		m = new(agentv1.ConnectRequest)
		if uerr := proto.Unmarshal(payload, m); uerr != nil {
			m, err = nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unmarshal message: %w", uerr))
		}
	}
	rest := copy(b, b[5+size:])
	*c.in = b[:rest]
	if rest == 0 {
		putBuf(c.in)
		c.in = nil
	}
	k := int64(5 + size)
	c.credit(max(0, k-c.credited), true)
	c.credited = max(0, c.credited-k)
	return m, err
}

// gunzip decompresses p, reading at most max+1 bytes out: a message over
// max is reported as over it, never decompressed further to say by how
// much.
func gunzip(p []byte, max int, what string) ([]byte, error) {
	zr, _ := gzReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(p))
	} else {
		err = zr.Reset(bytes.NewReader(p))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("decompress: %w", err))
	}
	defer gzReaders.Put(zr)
	r := io.Reader(zr)
	if max > 0 {
		r = io.LimitReader(zr, int64(max)+1)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("decompress: %w", err))
	}
	if max > 0 && len(out) > max {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s decompressed is over %d bytes, the configured max", what, max))
	}
	return out, nil
}

// Send sends one message.
func (st *Stream) Send(m *agentv1.ConnectResponse) error {
	c := st.c
	bp := getBuf()
	defer putBuf(bp)
	b := append((*bp)[:0], 0, 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("marshal message: %w", err))
	}
	*bp = b
	if c.gzipOut && len(b)-5 >= c.srv.CompressMinBytes {
		zp := getBuf()
		defer putBuf(zp)
		z := bytes.NewBuffer(append((*zp)[:0], 1, 0, 0, 0, 0))
		zw, _ := gzWriters.Get().(*gzip.Writer)
		if zw == nil {
			zw = gzip.NewWriter(z)
		} else {
			zw.Reset(z)
		}
		zw.Write(b[5:])
		zw.Close()
		gzWriters.Put(zw)
		*zp = z.Bytes()
		b = *zp
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.sendData(b, false)
}

// Flush writes at once what Sends left pending while the connection is
// corked (see Receive).
func (st *Stream) Flush() error {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

// endStream sends the Connect end-of-stream message for the handler's
// error and ends the stream.
func (c *conn) endStream(herr error) {
	c.wmu.Lock()
	reset := c.reset
	c.wmu.Unlock()
	if reset {
		return
	}
	type wireError struct {
		Code    string `json:"code"`
		Message string `json:"message,omitempty"`
	}
	var end struct {
		Error *wireError `json:"error,omitempty"`
	}
	if herr != nil {
		var ce *connect.Error
		if errors.As(herr, &ce) {
			end.Error = &wireError{ce.Code().String(), ce.Message()}
		} else {
			end.Error = &wireError{connect.CodeUnknown.String(), herr.Error()}
		}
	}
	js, _ := json.Marshal(end)
	b := make([]byte, 5, 5+len(js))
	b[0] = 0x02
	binary.BigEndian.PutUint32(b[1:], uint32(len(js)))
	b = append(b, js...)
	c.smu.Lock()
	err := c.sendData(b, true)
	c.smu.Unlock()
	if err != nil {
		return
	}
	// The client's half is still open: tell it to stop sending.
	c.rmu.Lock()
	open := !c.halfClosed && c.rerr == nil
	c.rmu.Unlock()
	if open {
		var a [4]byte
		c.control(frameRSTStream, 0, c.stream, a[:])
	}
}

// responseHeaders are the response's header blocks, never indexed, so
// the same bytes serve every connection.
var responseHeaders, responseHeadersGzip = func() ([]byte, []byte) {
	enc := func(gz bool) []byte {
		var buf bytes.Buffer
		e := hpack.NewEncoder(&buf)
		e.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		e.WriteField(hpack.HeaderField{Name: "content-type", Value: contentType, Sensitive: true})
		if gz {
			e.WriteField(hpack.HeaderField{Name: "connect-content-encoding", Value: "gzip", Sensitive: true})
		}
		e.WriteField(hpack.HeaderField{Name: "connect-accept-encoding", Value: "gzip", Sensitive: true})
		return buf.Bytes()
	}
	return enc(false), enc(true)
}()

// sendData sends b on the stream (the response headers first if not yet
// sent), in DATA frames within the flow-control windows; end sets
// END_STREAM on the last. smu is held.
func (c *conn) sendData(b []byte, end bool) error {
	deadline := time.Now().Add(c.srv.writeTimeout())
	wp := getBuf()
	defer putBuf(wp)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w := (*wp)[:0]
	if c.ended || c.reset {
		return errors.New("agentwire: stream ended")
	}
	if !c.headersSent {
		h := responseHeaders
		if c.gzipOut {
			h = responseHeadersGzip
		}
		w = appendFrameHeader(w, len(h), frameHeaders, flagEndHeaders, c.stream)
		w = append(w, h...)
		c.headersSent = true
	}
	for len(b) > 0 || end {
		n := int64(min(len(b), c.peerMaxFrame))
		n = min(n, c.sendConnWin, c.sendStreamWin)
		if n <= 0 && len(b) > 0 {
			if len(w) > 0 {
				if err := c.writeLocked(w); err != nil {
					return err
				}
				w = w[:0]
			}
			// The client credits only what it has received.
			if err := c.flushLocked(); err != nil {
				return err
			}
			if err := c.waitWindow(deadline); err != nil {
				return err
			}
			continue
		}
		var flags byte
		if end && int(n) == len(b) {
			flags = flagEndStream
			c.ended = true
		}
		w = appendFrameHeader(w, int(n), frameData, flags, c.stream)
		w = append(w, b[:n]...)
		b = b[n:]
		c.sendConnWin -= n
		c.sendStreamWin -= n
		if flags != 0 {
			break
		}
	}
	*wp = w
	if end {
		// The stream's last frames go out now, after what is pending.
		c.corked = false
		if err := c.flushLocked(); err != nil {
			return err
		}
	}
	return c.writeLocked(w)
}

// waitWindow waits for flow-control window; wmu is held. When no one
// reads the connection (the handler is busy, or is the sender), the
// waiter reads frames itself until the WINDOW_UPDATE comes.
func (c *conn) waitWindow(deadline time.Time) error {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for c.sendConnWin <= 0 || c.sendStreamWin <= 0 {
		if c.werr != nil {
			return c.werr
		}
		if c.reset || c.done {
			return errors.New("agentwire: stream ended")
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("agentwire: no flow-control window for %s", c.srv.writeTimeout())
			c.werr = err
			c.nc.Close()
			return err
		}
		if c.rmu.TryLock() {
			c.wmu.Unlock()
			c.nc.SetReadDeadline(deadline)
			c.step()
			c.releaseRead()
			c.rmu.Unlock()
			c.wmu.Lock()
			continue
		}
		if t == nil {
			t = time.AfterFunc(time.Until(deadline), func() {
				c.wmu.Lock()
				c.cond.Broadcast()
				c.wmu.Unlock()
			})
		}
		c.cond.Wait()
	}
	return nil
}
