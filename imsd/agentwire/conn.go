package agentwire

// One connection: its goroutine, reading and handling frames, flow-control
// credit, writes and the end of the connection.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2/hpack"
)

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
	// hdr is the header block being decoded (nil between blocks: an
	// idle connection need not hold it).
	hdr *requestHeaders
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

	ctx *streamCtx // the handler's; nil until it runs
}

// serve runs the connection: our SETTINGS, the client's first frames,
// the stream's handler, then the end of the connection.
//
// While the stream is idle, its goroutine's stack holds serve, the
// handler, Receive and the network read: keep their frames small (a
// stack whose used part is under 1248 bytes shrinks to 4 KiB; see
// runtime.shrinkstack). The connection's setup and end are in functions
// of their own for that reason. (docs/performance-connections.md, "The idle stack",
// has the figures.)
func (c *conn) serve() {
	defer c.srv.track(c, false)
	defer c.contained()
	if !c.start() {
		c.finishConn()
		return
	}
	ctx := newStreamCtx()
	c.ctx = ctx
	herr := c.srv.Handler(ctx, &Stream{c: c})
	ctx.cancel()
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
	// Bounded in bytes too: a flooding client gets no more reads. A
	// client that broke no rule may have up to the window we advertised
	// in flight (an oversized first message, say); closing with that
	// unread would reset the connection before it reads our error, so
	// then read that much. After a connection error (a flood, a protocol
	// violation) only finishDiscardMax.
	limit := finishDiscardMax
	if code == uint32(errNo) {
		limit = max(limit, c.recvWindow)
	}
	var discard [512]byte
	for n := 0; n < limit; {
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
		if c.ctx != nil {
			c.ctx.cancel()
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
	if c.ctx != nil {
		c.ctx.cancel()
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
	c.hdr = &requestHeaders{endStream: flags&flagEndStream != 0}
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
	sid, h := c.blockStream, c.hdr
	c.blockStream, c.hdr = 0, nil
	c.dec.SetEmitFunc(func(hpack.HeaderField) {})
	if c.tableZero {
		c.dec = nil
	}
	if sid == c.stream && c.stream != 0 {
		return nil // trailers
	}
	if c.stream == 0 && (h.isAgentStream() || c.srv.testAnyRequest) {
		c.stream = sid
		c.halfClosed = h.endStream // only where testAnyRequest lets one in
		c.gzipIn = h.encoding == "gzip"
		c.wmu.Lock()
		c.gzipOut = c.srv.CompressMinBytes > 0 && h.acceptsGzip()
		c.sendStreamWin = c.peerInitialWindow
		c.goAwayStream = sid
		c.wmu.Unlock()
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
