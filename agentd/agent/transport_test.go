package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// heartbeatSink is an agent service whose stream takes heartbeats until
// the agent closes its side, then answers with how many arrived in order.
type heartbeatSink struct {
	agentv1connect.UnimplementedAgentServiceHandler
	got chan uint64
}

func (h heartbeatSink) Connect(_ context.Context, st *connect.BidiStream[agentv1.ConnectRequest, agentv1.ConnectResponse]) error {
	var n uint64
	for {
		m, err := st.Receive()
		if err != nil {
			h.got <- n
			return nil
		}
		if m.GetHeartbeat().GetSeq() == n+1 {
			n++
		}
	}
}

// streamWrites sends n heartbeats on one agent stream through rt's
// client and returns the writes on the connection while they were sent,
// and how many arrived in order.
func streamWrites(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, n int) (int64, uint64) {
	t.Helper()
	sink := heartbeatSink{got: make(chan uint64, 1)}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(sink))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	var writes atomic.Int64
	tr := NewTransport()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	defer tr.CloseIdleConnections()
	client := agentv1connect.NewAgentServiceClient(&http.Client{Transport: wrap(tr)}, srv.URL)
	st := client.Connect(context.Background())
	if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: 1}}}); err != nil {
		t.Fatal(err)
	}
	// The connection's preface, settings and the request's headers are
	// behind us once the first message has gone.
	time.Sleep(100 * time.Millisecond)
	before := writes.Load()
	for seq := uint64(2); seq <= uint64(n); seq++ {
		if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Seq: seq}}}); err != nil {
			t.Fatal(err)
		}
	}
	sent := writes.Load() - before
	if err := st.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	got := <-sink.got
	st.CloseResponse()
	return sent, got
}

// TestWholeMessagesOneWritePerMessage: agentd's client sends each
// message on its stream to imsd as one DATA frame, in one write, where
// connect-go and Go's HTTP/2 transport alone make two (prefix, then
// message), every message arriving whole and in order.
func TestWholeMessagesOneWritePerMessage(t *testing.T) {
	const n = 200
	whole, got := streamWrites(t, WholeMessages, n)
	if got != n {
		t.Fatalf("imsd's side got %d heartbeats in order, want %d", got, n)
	}
	raw, _ := streamWrites(t, func(rt http.RoundTripper) http.RoundTripper { return rt }, n)
	t.Logf("%d messages: %d writes with WholeMessages, %d without", n-1, whole, raw)
	// One write a message, and a few more at most (a window update).
	if whole > n+n/10 {
		t.Errorf("%d writes for %d messages (%d without WholeMessages): want one a message", whole, n-1, raw)
	}
}

// TestWholeMessagesLeavesUnaryAlone: a unary request's body (not
// enveloped) reaches the transport as it was.
func TestWholeMessagesLeavesUnaryAlone(t *testing.T) {
	var seen io.ReadCloser
	rt := WholeMessages(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = r.Body
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	body := io.NopCloser(strings.NewReader("\x00\x00\x00\x00\x05hello"))
	req, _ := http.NewRequest("POST", "http://imsd.test/byoc.agent.v1.AgentService/Enroll", body)
	req.Header.Set("Content-Type", "application/proto")
	req.ContentLength = -1
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if seen != body {
		t.Errorf("a unary request's body was wrapped (%T)", seen)
	}
	req.Header.Set("Content-Type", "application/connect+proto")
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if _, ok := seen.(*envelopeBody); !ok {
		t.Errorf("a streaming request's body was not wrapped (%T)", seen)
	}
	if req.Body != body {
		t.Error("RoundTrip changed the caller's request")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzEnvelopeBody: whatever the messages, however the writer splits
// them and whatever the reader's buffer, the bytes come out unchanged,
// and every Read ends at the end of an envelope or of the buffer.
func FuzzEnvelopeBody(f *testing.F) {
	f.Add([]byte{3, 0, 200, 7}, []byte{5, 1, 2}, uint16(16))
	f.Add([]byte{0, 0, 0}, []byte{1}, uint16(1))
	f.Add([]byte{100, 255, 1, 60, 2}, []byte{0, 9, 4, 200}, uint16(4096))
	f.Fuzz(func(t *testing.T, sizes, splits []byte, bufLen uint16) {
		if len(sizes) > 64 {
			sizes = sizes[:64]
		}
		// The stream: envelopes of the given sizes (times 7, up to 1,785
		// bytes), each message filled with its index.
		var stream []byte
		var ends []int // offsets where an envelope ends
		for i, s := range sizes {
			n := int(s) * 7
			var prefix [5]byte
			prefix[0] = byte(i % 3)
			binary.BigEndian.PutUint32(prefix[1:], uint32(n))
			stream = append(stream, prefix[:]...)
			stream = append(stream, bytes.Repeat([]byte{byte(i)}, n)...)
			ends = append(ends, len(stream))
		}
		pr, pw := io.Pipe()
		go func() {
			rest, k := stream, 0
			for len(rest) > 0 {
				n := len(rest)
				if len(splits) > 0 {
					n = min(n, int(splits[k%len(splits)])+1)
					k++
				}
				pw.Write(rest[:n])
				rest = rest[n:]
			}
			pw.Close()
		}()
		e := &envelopeBody{body: pr}
		buf := make([]byte, int(bufLen%4096)+1)
		var out []byte
		atEnd := map[int]bool{0: true}
		for _, o := range ends {
			atEnd[o] = true
		}
		for {
			n, err := e.Read(buf)
			out = append(out, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if n < len(buf) && !atEnd[len(out)] {
				t.Fatalf("a Read of %d bytes (buffer %d) ended at %d, inside an envelope", n, len(buf), len(out))
			}
		}
		if !bytes.Equal(out, stream) {
			t.Fatalf("read %d bytes that differ from the %d written", len(out), len(stream))
		}
	})
}
