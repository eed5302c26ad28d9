package agentwire

// The agent stream on a connection: receiving and sending Connect messages,
// the end of stream, and the message buffers' pools.

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

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
		Error    *wireError          `json:"error,omitempty"`
		Metadata map[string][]string `json:"metadata,omitempty"`
	}
	if herr != nil {
		var ce *connect.Error
		if errors.As(herr, &ce) {
			end.Error = &wireError{ce.Code().String(), ce.Message()}
			if len(ce.Meta()) > 0 {
				end.Metadata = ce.Meta()
			}
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
