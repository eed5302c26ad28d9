package agentwire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// chunkConn is a net.Conn whose reads return data in pieces of the given
// sizes (the last repeated), then io.EOF.
type chunkConn struct {
	net.Conn
	data   []byte
	chunks []int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data))
	if len(c.chunks) > 0 {
		n = min(n, max(1, c.chunks[0]))
		if len(c.chunks) > 1 {
			c.chunks = c.chunks[1:]
		}
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkConn) SetReadDeadline(time.Time) error { return nil }

// requestBlock encodes a request's header block.
func requestBlock(fields ...string) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		e.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return b.Bytes()
}

var agentRequest = []string{":method", "POST", ":scheme", "http", ":authority", "imsd", ":path", Path, "content-type", contentType, "connect-accept-encoding", "gzip"}

// fuzzSeeds are client byte streams (after the preface): the agent
// stream's request and a message, split and padded and surrounded by the
// frames a client may send.
func fuzzSeeds() [][]byte {
	block := requestBlock(agentRequest...)
	msg := envelope(logsOf("hello"))
	frame := func(typ, flags byte, sid uint32, p []byte) []byte {
		return append(appendFrameHeader(nil, len(p), typ, flags, sid), p...)
	}
	settings := frame(frameSettings, 0, 0, []byte{0, 4, 0, 1, 0, 0})
	return [][]byte{
		slicesConcat(frame(frameHeaders, flagEndHeaders, 1, block), frame(frameData, 0, 1, msg)),
		slicesConcat(settings, frame(frameHeaders, 0, 1, block[:3]), frame(frameContinuation, flagEndHeaders, 1, block[3:]),
			frame(framePing, 0, 0, make([]byte, 8)), frame(frameWindowUpdate, 0, 0, []byte{0, 1, 0, 0}), frame(frameData, flagEndStream, 1, msg)),
		slicesConcat(frame(frameHeaders, flagEndHeaders|flagPadded|flagPriority, 1, slicesConcat([]byte{2, 0, 0, 0, 0, 16}, block, []byte{0, 0})),
			frame(frameData, flagPadded, 1, slicesConcat([]byte{1}, msg, []byte{0})), frame(frameHeaders, flagEndHeaders, 3, requestBlock(":method", "GET", ":path", "/healthz")),
			frame(frameRSTStream, 0, 1, []byte{0, 0, 0, 8})),
		slicesConcat(frame(frameHeaders, flagEndHeaders, 1, block), frame(frameGoAway, 0, 0, make([]byte, 8)), frame(frameSettings, flagAck, 0, nil)),
		slicesConcat(frame(frameHeaders, flagEndHeaders|flagEndStream, 1, requestBlock(":method", "GET", ":path", Path))),
	}
}

func slicesConcat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// FuzzSniff routes random client byte streams. Properties: raw is a
// prefix of what the client sent, at most 16 KiB; how the bytes arrive
// (all at once or in pieces) changes neither the decision nor the error;
// and a stream Sniff calls the agent stream is one whose first request
// x/net/http2's own framer and HPACK decoder read as POST Path with the
// Connect protobuf content type (where that framer can read it at all).
func FuzzSniff(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		deadline := time.Now().Add(time.Second)
		raw, agent, err := Sniff(&chunkConn{data: data}, deadline)
		if !bytes.HasPrefix(data, raw) || len(raw) > sniffMax {
			t.Fatalf("raw (%d bytes) is not a prefix of the input of at most %d bytes", len(raw), sniffMax)
		}
		raw2, agent2, err2 := Sniff(&chunkConn{data: data, chunks: []int{int(piece), 1, int(piece) * 3}}, deadline)
		if !bytes.HasPrefix(data, raw2) {
			t.Fatal("raw is not a prefix of the input (in pieces)")
		}
		if agent != agent2 || !errors.Is(err, err2) && !errors.Is(err2, err) {
			t.Fatalf("at once: %v, %v; in pieces: %v, %v", agent, err, agent2, err2)
		}
		if !agent {
			return
		}
		fr := http2.NewFramer(nil, bytes.NewReader(raw))
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		for {
			fm, err := fr.ReadFrame()
			if err != nil {
				return // stricter than Sniff about what came first: no verdict
			}
			mh, ok := fm.(*http2.MetaHeadersFrame)
			if !ok {
				continue
			}
			if mh.PseudoValue("method") != "POST" || mh.PseudoValue("path") != Path || !bytesEqualFold(mh.Fields, "content-type", contentType) {
				t.Fatalf("Sniff took a request for the agent stream that x/net reads as %v", mh.Fields)
			}
			return
		}
	})
}

func bytesEqualFold(fields []hpack.HeaderField, name, value string) bool {
	for _, f := range fields {
		if f.Name == name {
			return bytes.EqualFold([]byte(f.Value), []byte(value))
		}
	}
	return false
}

// FuzzServeConn serves a random client byte stream on a net.Pipe.
// Properties: no panic (Panics stays 0: a contained panic would hide
// from the fuzzer); the connection is over within two seconds of the
// client closing it; and everything the server wrote is a well-formed
// sequence of HTTP/2 frames to x/net/http2's framer, whose header
// blocks decode.
func FuzzServeConn(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &Server{WriteTimeout: time.Second, InitialWindowSize: 64 << 10, CompressMinBytes: 16, Handler: func(ctx context.Context, st *Stream) error {
			for {
				m, err := st.Receive(100 * time.Millisecond)
				if err != nil {
					return err
				}
				if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Rejected{Rejected: &agentv1.WriteRejected{Message: m.String()}}}); err != nil {
					return err
				}
			}
		}}
		client, server := net.Pipe()
		var out bytes.Buffer
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			io.Copy(&out, client)
		}()
		s.ServeConn(server, nil)
		client.SetWriteDeadline(time.Now().Add(time.Second))
		client.Write(data)
		client.Close()
		<-drained
		deadline := time.Now().Add(2 * time.Second)
		for s.Conns() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the connection is still served 2s after the client closed it")
			}
			time.Sleep(time.Millisecond)
		}
		if n := s.Panics(); n != 0 {
			t.Fatalf("%d panics", n)
		}
		fr := http2.NewFramer(nil, bytes.NewReader(out.Bytes()))
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		for {
			_, err := fr.ReadFrame()
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				return // the end, perhaps in the middle of a frame the pipe's close cut
			}
			if err != nil {
				t.Fatalf("the server wrote what x/net/http2 cannot read: %v", err)
			}
		}
	})
}
