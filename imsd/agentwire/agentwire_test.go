package agentwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// testServer serves agent-wire connections on 127.0.0.1 the way imsd's
// h2c listener does: preface, Sniff, ServeConn (other requests are
// dropped).
type testServer struct {
	*Server
	ln    net.Listener
	ended chan error // each handler's result
	wg    sync.WaitGroup
}

// echo is the default test handler: a challenge first, then per message
// an answer: Heartbeat → Accepted{WriteId: number of running jobs};
// Logs → Rejected carrying the first line's text back; Hello → the
// error it asks for in its agent id.
func echo(limit time.Duration) Handler {
	return func(ctx context.Context, st *Stream) error {
		if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Challenge{Challenge: &agentv1.Challenge{Nonce: []byte("n")}}}); err != nil {
			return err
		}
		for {
			m, err := st.Receive(limit)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return connect.NewError(connect.CodeDeadlineExceeded, errors.New("no message from the agent for a while"))
				}
				return err
			}
			var out *agentv1.ConnectResponse
			switch x := m.Msg.(type) {
			case *agentv1.ConnectRequest_Heartbeat:
				out = &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: uint64(len(x.Heartbeat.Running))}}}
			case *agentv1.ConnectRequest_Logs:
				out = &agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Rejected{Rejected: &agentv1.WriteRejected{Message: x.Logs.Lines[0].Text}}}
			case *agentv1.ConnectRequest_Hello:
				return connect.NewError(connect.CodeUnauthenticated, errors.New(x.Hello.AgentId))
			}
			if err := st.Send(out); err != nil {
				return err
			}
		}
	}
}

func startServer(t *testing.T, s *Server) *testServer { return startServerWrapped(t, s, nil) }

// startServerWrapped is startServer with each accepted connection passed
// through wrap, when set.
func startServerWrapped(t *testing.T, s *Server, wrap func(net.Conn) net.Conn) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, ln: ln, ended: make(chan error, 1000)}
	h := s.Handler
	s.Handler = func(ctx context.Context, st *Stream) error {
		err := h(ctx, st)
		ts.ended <- err
		return err
	}
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				var pre [len(http2.ClientPreface)]byte
				if _, err := io.ReadFull(c, pre[:]); err != nil || string(pre[:]) != http2.ClientPreface {
					c.Close()
					return
				}
				raw, agent, err := Sniff(c, time.Now().Add(5*time.Second))
				if err != nil || !agent {
					c.Close()
					return
				}
				if wrap != nil {
					c = wrap(c)
				}
				s.ServeConn(c, raw)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		ts.wg.Wait()
	})
	return ts
}

func (ts *testServer) url() string { return "http://" + ts.ln.Addr().String() }

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func openStream(t *testing.T, url string, opts ...connect.ClientOption) *connect.BidiStreamForClient[agentv1.ConnectRequest, agentv1.ConnectResponse] {
	t.Helper()
	c := agentv1connect.NewAgentServiceClient(h2cClient(), url, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := c.Connect(ctx)
	if err := st.Send(nil); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil || m.GetChallenge() == nil {
		t.Fatalf("challenge: %v, %v", m, err)
	}
	return st
}

func logsOf(text string) *agentv1.ConnectRequest {
	return &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Logs{Logs: &agentv1.JobLogs{Lines: []*agentv1.LogLine{{Text: text}}}}}
}

// TestConnectClient runs connect-go's own client over the server:
// messages both ways, larger than the windows, compressed both ways, and
// a handler error arriving as the same connect.Error.
func TestConnectClient(t *testing.T) {
	for _, gz := range []bool{false, true} {
		name := "identity"
		var opts []connect.ClientOption
		if gz {
			name = "gzip"
			opts = append(opts, connect.WithSendGzip())
		}
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, &Server{Handler: echo(0), ReadMaxBytes: 16 << 20, CompressMinBytes: 4 << 10, InitialWindowSize: 16 << 10})
			st := openStream(t, ts.url(), opts...)
			if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Running: make([]*agentv1.RunningJob, 3)}}}); err != nil {
				t.Fatal(err)
			}
			if m, err := st.Receive(); err != nil || m.GetAccepted().GetWriteId() != 3 {
				t.Fatalf("heartbeat answer: %v, %v", m, err)
			}
			big := strings.Repeat("0123456789abcdef", 200<<10) // 3.2 MB, many windows
			big = big[:len(big)-1] + "!"
			if err := st.Send(logsOf(big)); err != nil {
				t.Fatal(err)
			}
			if m, err := st.Receive(); err != nil || m.GetRejected().GetMessage() != big {
				t.Fatalf("large message came back changed (%d bytes), %v", len(m.GetRejected().GetMessage()), err)
			}
			if err := st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Hello{Hello: &agentv1.Hello{AgentId: "go away"}}}); err != nil {
				t.Fatal(err)
			}
			_, err := st.Receive()
			if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.HasSuffix(err.Error(), ": go away") {
				t.Fatalf("got %v, want unauthenticated: go away", err)
			}
		})
	}
}

func TestReadMaxBytes(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0), ReadMaxBytes: 1000})
	st := openStream(t, ts.url())
	st.Send(logsOf(strings.Repeat("x", 2000)))
	_, err := st.Receive()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "larger than configured max 1000") {
		t.Fatalf("got %v", err)
	}
}

func TestIdleCutOff(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(200 * time.Millisecond)})
	st := openStream(t, ts.url())
	_, err := st.Receive()
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("got %v, want deadline_exceeded", err)
	}
}

// rawClient is an HTTP/2 client built on x/net/http2's Framer.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
	// One HPACK encoder for the connection, as a real client has: its
	// later blocks refer to entries its first added.
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

func dialRaw(t *testing.T, ts *testServer, settings ...http2.Setting) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", ts.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	r := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	r.fr.WriteSettings(settings...)
	return r
}

func (r *rawClient) headers(stream uint32, path string) {
	r.t.Helper()
	if r.enc == nil {
		r.enc = hpack.NewEncoder(&r.hbuf)
	}
	r.hbuf.Reset()
	e, b := r.enc, &r.hbuf
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}, {"content-type", contentType}, {"user-agent", "raw"}} {
		e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: b.Bytes(), EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

// envelope frames a message in the Connect protocol.
func envelope(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...)
}

// next reads frames until one of type typ (answering nothing itself),
// and returns it.
func (r *rawClient) next(typ http2.FrameType) http2.Frame {
	r.t.Helper()
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("waiting for %v: %v", typ, err)
		}
		if f.Header().Type == typ {
			return f
		}
	}
}

// open opens the agent stream and reads the response headers and the
// challenge message.
func (r *rawClient) open() {
	r.t.Helper()
	r.headers(1, Path)
	r.next(http2.FrameHeaders)
	r.readMessage()
}

// readMessage reads one response message from stream 1's DATA frames,
// sending WINDOW_UPDATEs for what it reads.
func (r *rawClient) readMessage() []byte {
	r.t.Helper()
	var buf []byte
	for {
		if len(buf) >= 5 {
			n := int(binary.BigEndian.Uint32(buf[1:5]))
			if len(buf) >= 5+n {
				return buf[5 : 5+n]
			}
		}
		f := r.next(http2.FrameData).(*http2.DataFrame)
		buf = append(buf, f.Data()...)
		if n := uint32(f.Length); n > 0 {
			r.fr.WriteWindowUpdate(0, n)
			r.fr.WriteWindowUpdate(1, n)
		}
	}
}

func (r *rawClient) expectGoAway(code http2.ErrCode) {
	r.t.Helper()
	f := r.next(http2.FrameGoAway).(*http2.GoAwayFrame)
	if f.ErrCode != code {
		r.t.Fatalf("GOAWAY %v, want %v", f.ErrCode, code)
	}
}

func TestPingAndSettings(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	r.headers(1, Path) // the server answers once it knows the request
	gotSettings, gotAck := false, false
	for !gotSettings || !gotAck {
		f := r.next(http2.FrameSettings).(*http2.SettingsFrame)
		if f.IsAck() {
			gotAck = true
			continue
		}
		gotSettings = true
		if v, ok := f.Value(http2.SettingMaxConcurrentStreams); !ok || v != 1 {
			t.Fatalf("MAX_CONCURRENT_STREAMS = %d, %v; want 1", v, ok)
		}
	}
	r.fr.WriteSettingsAck()
	r.next(http2.FrameHeaders)
	r.readMessage() // the challenge
	r.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	p := r.next(http2.FramePing).(*http2.PingFrame)
	if !p.IsAck() || p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Fatalf("PING answer %v", p)
	}
	r.fr.WritePing(false, [8]byte{9})
	if p := r.next(http2.FramePing).(*http2.PingFrame); !p.IsAck() || p.Data != [8]byte{9} {
		t.Fatalf("PING answer %v", p)
	}
}

// A second request is refused with REFUSED_STREAM (its DATA ignored),
// and the agent stream goes on.
func TestSecondStreamRefused(t *testing.T) {
	for _, ack := range []bool{false, true} {
		t.Run(fmt.Sprintf("settings acknowledged=%v", ack), func(t *testing.T) { testSecondStreamRefused(t, ack) })
	}
}

func testSecondStreamRefused(t *testing.T, ack bool) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts)
	r.open()
	if ack {
		// The server then decodes with an empty table, and the client's
		// next block starts by emptying its own (RFC 7541 §4.2).
		r.fr.WriteSettingsAck()
		r.enc.SetMaxDynamicTableSizeLimit(0)
	}
	r.headers(3, "/byoc.agent.v1.AgentService/Enroll")
	r.fr.WriteData(3, true, []byte("ignored"))
	rst := r.next(http2.FrameRSTStream).(*http2.RSTStreamFrame)
	if rst.StreamID != 3 || rst.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("got %v, want RST_STREAM REFUSED_STREAM on 3", rst)
	}
	r.fr.WriteData(1, false, envelope(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{Running: make([]*agentv1.RunningJob, 2)}}}))
	var m agentv1.ConnectResponse
	if err := proto.Unmarshal(r.readMessage(), &m); err != nil || m.GetAccepted().GetWriteId() != 2 {
		t.Fatalf("answer %v, %v", &m, err)
	}
}

// A message larger than the client's window reaches it only as the
// client sends WINDOW_UPDATEs.
func TestSendWaitsForWindow(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	r.open() // the challenge fits in 1000 bytes; readMessage gives the window back
	text := strings.Repeat("y", 5000)
	r.fr.WriteData(1, false, envelope(logsOf(text)))
	// Read without giving window back: at most 1000 bytes come.
	var buf []byte
	r.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			break
		}
		if d, ok := f.(*http2.DataFrame); ok {
			buf = append(buf, d.Data()...)
		}
	}
	if len(buf) == 0 || len(buf) > 1000 {
		t.Fatalf("read %d bytes before any WINDOW_UPDATE; want 1..1000", len(buf))
	}
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r.fr = http2.NewFramer(r.c, r.c)
	r.fr.WriteWindowUpdate(0, uint32(len(buf)))
	r.fr.WriteWindowUpdate(1, uint32(len(buf)))
	for len(buf) < 5 || len(buf) < 5+int(binary.BigEndian.Uint32(buf[1:5])) {
		f := r.next(http2.FrameData).(*http2.DataFrame)
		buf = append(buf, f.Data()...)
		r.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
		r.fr.WriteWindowUpdate(1, uint32(len(f.Data())))
	}
	var m agentv1.ConnectResponse
	if err := proto.Unmarshal(buf[5:], &m); err != nil || m.GetRejected().GetMessage() != text {
		t.Fatalf("answer of %d bytes, %v", len(m.GetRejected().GetMessage()), err)
	}
}

// A message larger than the server's window arrives whole, sent as the
// server's WINDOW_UPDATEs allow.
func TestReceiveBeyondWindow(t *testing.T) {
	// The first message is this large one (not a hello).
	ts := startServer(t, &Server{Handler: echo(0), InitialWindowSize: 16 << 10, FirstMessageMaxBytes: 1 << 20})
	r := dialRaw(t, ts)
	r.open()
	text := strings.Repeat("z", 100<<10)
	b := envelope(logsOf(text))
	// The server's SETTINGS set the stream window to 16 KiB; so is the
	// connection's (65535 less what it never announced is not used).
	connWin, streamWin := int64(65535), int64(16<<10)
	sent := 0
	for sent < len(b) {
		n := min(len(b)-sent, 16<<10, int(min(connWin, streamWin)))
		if n <= 0 {
			f := r.next(http2.FrameWindowUpdate).(*http2.WindowUpdateFrame)
			if f.StreamID == 0 {
				connWin += int64(f.Increment)
			} else {
				streamWin += int64(f.Increment)
			}
			continue
		}
		r.fr.WriteData(1, false, b[sent:sent+n])
		sent += n
		connWin -= int64(n)
		streamWin -= int64(n)
	}
	var m agentv1.ConnectResponse
	if err := proto.Unmarshal(r.readMessage(), &m); err != nil || m.GetRejected().GetMessage() != text {
		t.Fatalf("answer of %d bytes, %v", len(m.GetRejected().GetMessage()), err)
	}
}

func TestOversizeFrame(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts)
	r.open()
	r.fr.WriteData(1, false, make([]byte, 20000)) // more than the 16 KiB we accept
	r.expectGoAway(http2.ErrCodeFrameSize)
	if err := <-ts.ended; err == nil {
		t.Fatal("the handler ended without an error")
	}
}

func TestGarbage(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	for name, send := range map[string]func(r *rawClient){
		"continuation without headers": func(r *rawClient) { r.fr.WriteContinuation(1, true, []byte{0x82}) },
		"settings on a stream":         func(r *rawClient) { r.fr.WriteRawFrame(http2.FrameSettings, 0, 1, nil) },
		"push promise":                 func(r *rawClient) { r.fr.WriteRawFrame(http2.FramePushPromise, 4, 1, []byte{0, 0, 0, 2}) },
		"data on an idle stream":       func(r *rawClient) { r.fr.WriteData(7, false, []byte("x")) },
	} {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, ts)
			r.open()
			send(r)
			r.expectGoAway(http2.ErrCodeProtocol)
			<-ts.ended
		})
	}
}

func TestClientReset(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts)
	r.open()
	r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	select {
	case err := <-ts.ended:
		if connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("handler ended with %v, want canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not end")
	}
	// The connection ends (its graceful GOAWAY came with the response).
	for {
		if _, err := r.fr.ReadFrame(); err != nil {
			if err != io.EOF {
				t.Fatalf("read %v; want EOF", err)
			}
			break
		}
	}
}

// The response's first frames include a graceful GOAWAY naming the agent
// stream: the client opens no other stream on this connection.
func TestGoAwayUpFront(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts)
	r.headers(1, Path)
	f := r.next(http2.FrameGoAway).(*http2.GoAwayFrame)
	if f.ErrCode != http2.ErrCodeNo || f.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last %d; want NO_ERROR, 1", f.ErrCode, f.LastStreamID)
	}
	r.next(http2.FrameHeaders)
	r.readMessage()
}

// An idle agent connection holds exactly one goroutine: its reader,
// which runs the handler.
func TestOneGoroutinePerIdleConnection(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	// Warm up (the accept loop's and the runtime's own goroutines).
	r := dialRaw(t, ts)
	r.open()
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 50
	for range n {
		r := dialRaw(t, ts) // a bare socket: no client-side goroutine
		r.open()
	}
	var after int
	for range 50 { // short-lived goroutines (timers, writes) settle
		time.Sleep(20 * time.Millisecond)
		if after = runtime.NumGoroutine(); after-before == n {
			break
		}
	}
	if after-before != n {
		t.Fatalf("%d idle connections added %d goroutines; want %d", n, after-before, n)
	}
}

// An idle connection's goroutine waits on a stack shallow enough for the
// garbage collector to shrink it to 4 KiB (see conn.serve).
func TestIdleStackShrinks(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes frames larger")
	}
	ts := startServer(t, &Server{Handler: echo(0)})
	var ms runtime.MemStats
	stacks := func() uint64 {
		for range 4 { // each collection halves a stack at most once
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	before := stacks()
	const n = 100
	for range n {
		r := dialRaw(t, ts)
		r.open()
	}
	time.Sleep(50 * time.Millisecond)
	per := float64(stacks()-before) / n
	t.Logf("%.0f bytes of stack per idle connection", per)
	if per > 6<<10 {
		t.Fatalf("%.0f bytes of stack per idle connection; want about 4 KiB", per)
	}
}

// writeCounter counts a connection's writes.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w writeCounter) Write(b []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(b)
}

// The answers to messages that arrive together leave in one write; the
// answer to a message that arrives alone is not held back for another.
func TestAnswersToMessagesThatArriveTogetherShareAWrite(t *testing.T) {
	var writes atomic.Int64
	ts := startServerWrapped(t, &Server{Handler: echo(0)}, func(c net.Conn) net.Conn { return writeCounter{c, &writes} })
	r := dialRaw(t, ts)
	r.open()
	heartbeat := func(running int) []byte {
		hb := &agentv1.Heartbeat{}
		for range running {
			hb.Running = append(hb.Running, &agentv1.RunningJob{JobId: "j"})
		}
		return envelope(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: hb}})
	}
	answer := func() uint64 {
		var m agentv1.ConnectResponse
		if err := proto.Unmarshal(r.readMessage(), &m); err != nil {
			t.Fatal(err)
		}
		return m.GetAccepted().GetWriteId()
	}
	before := writes.Load()
	r.fr.WriteData(1, false, append(append(heartbeat(1), heartbeat(2)...), heartbeat(3)...))
	for want := range uint64(3) {
		if got := answer(); got != want+1 {
			t.Fatalf("answer %d: write id %d, want %d", want+1, got, want+1)
		}
	}
	if got := writes.Load() - before; got != 1 {
		t.Errorf("three answers took %d writes, want 1", got)
	}
	// Alone: answered at once (the client's deadline would end a wait).
	start := time.Now()
	r.fr.WriteData(1, false, heartbeat(4))
	if got := answer(); got != 4 {
		t.Fatalf("write id %d, want 4", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a lone message was answered after %s", d)
	}
}

// A message sent from another goroutine and flushed leaves at once, even
// while the handler, corked, is busy with a message (an assignment must
// not wait for the agent's stream to finish a database write).
func TestFlushWhileCorked(t *testing.T) {
	release := make(chan struct{})
	ts := startServer(t, &Server{Handler: func(ctx context.Context, st *Stream) error {
		st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Challenge{Challenge: &agentv1.Challenge{Nonce: []byte("n")}}})
		if _, err := st.Receive(0); err != nil {
			return err
		}
		// Busy with the message (corked); another goroutine sends.
		st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: 1}}})
		done := make(chan error, 1)
		go func() {
			if err := st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Cancel{Cancel: &agentv1.JobCancel{JobId: "j"}}}); err != nil {
				done <- err
				return
			}
			done <- st.Flush()
		}()
		if err := <-done; err != nil {
			return err
		}
		<-release
		_, err := st.Receive(0)
		return err
	}})
	defer close(release)
	r := dialRaw(t, ts)
	r.open()
	r.fr.WriteData(1, false, envelope(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Heartbeat{Heartbeat: &agentv1.Heartbeat{}}}))
	r.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for _, want := range []string{"accepted", "cancel"} {
		var m agentv1.ConnectResponse
		if err := proto.Unmarshal(r.readMessage(), &m); err != nil {
			t.Fatal(err)
		}
		if (want == "accepted") != (m.GetAccepted() != nil) || (want == "cancel") != (m.GetCancel() != nil) {
			t.Fatalf("got %v, want the %s, in order", &m, want)
		}
	}
}
