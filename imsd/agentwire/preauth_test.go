package agentwire

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// readCounter counts the bytes the server reads from a connection.
type readCounter struct {
	net.Conn
	n *atomic.Int64
}

func (r readCounter) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.n.Add(int64(n))
	return n, err
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A header block that never ends (HEADERS, then CONTINUATION frames that
// grow no header list: empty ones, or full ones of HPACK dynamic table
// size updates, which decode to nothing; the CVE-2023-45288 pattern) is
// cut off with ENHANCE_YOUR_CALM after a bounded number of frames or
// bytes, instead of being read until the hello timeout.
func TestContinuationFlood(t *testing.T) {
	for name, payload := range map[string][]byte{
		"empty frames":       nil,
		"table size updates": bytes.Repeat([]byte{0x20}, maxFrameSize),
	} {
		t.Run(name, func(t *testing.T) {
			var read atomic.Int64
			ts := startServerWrapped(t, &Server{Handler: echo(0)}, func(c net.Conn) net.Conn { return readCounter{c, &read} })
			r := dialRaw(t, ts)
			r.open() // the agent stream, up to the challenge
			if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x20}}); err != nil {
				t.Fatal(err)
			}
			var batch []byte
			for len(batch) < 32<<10 {
				batch = appendFrameHeader(batch, len(payload), frameContinuation, 0, 3)
				batch = append(batch, payload...)
			}
			start, cpu0 := time.Now(), cpuTime()
			var sent atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for time.Since(start) < 3*time.Second {
					n, err := r.c.Write(batch)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var code http2.ErrCode = 0xff // none
			for {
				f, err := r.fr.ReadFrame()
				if err != nil {
					break
				}
				if g, ok := f.(*http2.GoAwayFrame); ok && g.ErrCode != http2.ErrCodeNo {
					code = g.ErrCode
					break
				}
			}
			took := time.Since(start)
			r.c.Close()
			<-done
			t.Logf("%d bytes sent, %d read by the server, %s of CPU (client and server), GOAWAY %v after %s",
				sent.Load(), read.Load(), (cpuTime() - cpu0).Round(time.Millisecond), code, took.Round(time.Millisecond))
			if code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", code)
			}
			if took > time.Second {
				t.Errorf("the connection was cut off after %s", took)
			}
			// What the limits let through, the end's bounded discard, and
			// what the connection's buffers held.
			if n := read.Load(); n > 256<<10 {
				t.Errorf("the server read %d bytes of the flood", n)
			}
			if err := <-ts.ended; err == nil {
				t.Error("the handler ended without an error")
			}
		})
	}
}

// Sniff gives up on a first header block of too many CONTINUATION
// frames with ErrHeaderFlood (the listener closes the connection).
func TestSniffContinuationFlood(t *testing.T) {
	var b []byte
	var hb bytes.Buffer
	hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
	b = appendFrameHeader(b, hb.Len(), frameHeaders, 0, 1)
	b = append(b, hb.Bytes()...)
	for range maxContinuations + 1 {
		b = appendFrameHeader(b, 0, frameContinuation, 0, 1)
	}
	c, s := net.Pipe()
	defer c.Close()
	go func() { c.Write(b); c.Write(make([]byte, 1000)) }()
	_, agent, err := Sniff(s, time.Now().Add(5*time.Second))
	if agent || !errors.Is(err, ErrHeaderFlood) {
		t.Fatalf("agent %v, err %v; want ErrHeaderFlood", agent, err)
	}
}

// The stream's first message (the hello, before the client is
// authenticated) is held to FirstMessageMaxBytes, on the wire and after
// decompression; later ones to ReadMaxBytes.
func TestFirstMessageMax(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0), ReadMaxBytes: 16 << 20, FirstMessageMaxBytes: 4000})
	t.Run("over", func(t *testing.T) {
		st := openStream(t, ts.url())
		st.Send(logsOf(strings.Repeat("x", 8000)))
		_, err := st.Receive()
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "first message size 8009 is larger than configured max 4000") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("compressed", func(t *testing.T) {
		st := openStream(t, ts.url(), connect.WithSendGzip())
		st.Send(logsOf(strings.Repeat("x", 1<<20))) // about 1 KiB compressed
		_, err := st.Receive()
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "first message decompressed is over 4000 bytes") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("then larger", func(t *testing.T) {
		st := openStream(t, ts.url(), connect.WithSendGzip())
		for _, n := range []int{500, 200 << 10} {
			text := strings.Repeat("y", n)
			if err := st.Send(logsOf(text)); err != nil {
				t.Fatal(err)
			}
			if m, err := st.Receive(); err != nil || m.GetRejected().GetMessage() != text {
				t.Fatalf("message of %d bytes: %v", n, err)
			}
		}
	})
}

// gunzip stops at the limit: a bomb is reported as over it without being
// decompressed to the end.
func TestGunzipStopsAtLimit(t *testing.T) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(make([]byte, 16<<20)) // 16 MiB of zeros, about 16 KiB compressed
	zw.Close()
	// What it allocates, not how long it takes (a timed check flaked on
	// a busy machine): a gunzip that read the bomb through would hold
	// its 16 MiB.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := gunzip(z.Bytes(), 4096, "first message")
	runtime.ReadMemStats(&after)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "over 4096 bytes") {
		t.Fatalf("got %v", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("refused after allocating %d bytes", alloc)
	if alloc > 1<<20 {
		t.Errorf("gunzip allocated %d bytes to refuse a 16 MiB bomb at 4096 bytes", alloc)
	}
}

// A panic in a connection's goroutine, in the handler or while reading
// frames, ends that connection only: it is logged with its stack,
// counted, and the server goes on serving.
func TestPanicContained(t *testing.T) {
	var logs syncbuf.Buffer
	s := &Server{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	s.Handler = func(ctx context.Context, st *Stream) error {
		m, err := st.Receive(0)
		if err != nil {
			return err
		}
		if m.GetLogs().GetLines()[0].GetText() == "panic" {
			panic("handler test panic")
		}
		return st.Send(&agentv1.ConnectResponse{Msg: &agentv1.ConnectResponse_Accepted{Accepted: &agentv1.WriteAccepted{WriteId: 7}}})
	}
	s.testHookFrame = func(typ byte) {
		if typ == frameUnknownPanic {
			panic("frame test panic")
		}
	}
	ts := startServer(t, s)
	ok := func() {
		t.Helper()
		r := dialRaw(t, ts)
		r.headers(1, Path)
		r.fr.WriteData(1, false, envelope(logsOf("hi")))
		var m agentv1.ConnectResponse
		if err := proto.Unmarshal(r.readMessage(), &m); err != nil || m.GetAccepted().GetWriteId() != 7 {
			t.Fatalf("answer %v, %v", &m, err)
		}
	}
	closed := func(r *rawClient) {
		t.Helper()
		for {
			if _, err := r.fr.ReadFrame(); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("read %v; want the connection closed", err)
				}
				return
			}
		}
	}
	ok()
	r := dialRaw(t, ts)
	r.headers(1, Path)
	r.fr.WriteData(1, false, envelope(logsOf("panic")))
	closed(r)
	<-ts.ended // the test server's wrapper never sees the panicking handler return
	ok()
	r = dialRaw(t, ts)
	r.headers(1, Path)
	r.fr.WriteRawFrame(frameUnknownPanic, 0, 0, nil)
	closed(r)
	ok()
	if n := s.Panics(); n != 2 {
		t.Errorf("Panics() = %d, want 2", n)
	}
	out := logs.String()
	for _, want := range []string{"handler test panic", "frame test panic", "panic contained to its connection", "agentwire.TestPanicContained"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// frameUnknownPanic is a frame type no one defines, which the test hook
// makes panic.
const frameUnknownPanic = 0xee

// A stream that depends on itself is a protocol error, which ends the
// connection's one stream and so the connection (RFC 9113 §5.3.1).
func TestSelfDependency(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts)
	r.open()
	r.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1})
	r.expectGoAway(http2.ErrCodeProtocol)
	<-ts.ended
}

// A stream's window pushed above 2^31-1 is a stream error: RST_STREAM
// FLOW_CONTROL_ERROR, then the connection ends gracefully.
func TestStreamWindowOverflow(t *testing.T) {
	ts := startServer(t, &Server{Handler: echo(0)})
	r := dialRaw(t, ts)
	r.open()
	r.fr.WriteWindowUpdate(1, 1<<31-1)
	f := r.next(http2.FrameRSTStream).(*http2.RSTStreamFrame)
	if f.ErrCode != http2.ErrCodeFlowControl || f.StreamID != 1 {
		t.Fatalf("RST_STREAM %v on %d, want FLOW_CONTROL_ERROR on 1", f.ErrCode, f.StreamID)
	}
	if err := <-ts.ended; err == nil || !strings.Contains(err.Error(), "stream window above 2^31-1") {
		t.Fatalf("handler ended with %v", err)
	}
	for {
		fr, err := r.fr.ReadFrame()
		if err != nil {
			break
		}
		if g, ok := fr.(*http2.GoAwayFrame); ok && g.ErrCode != http2.ErrCodeNo {
			t.Fatalf("GOAWAY %v after a stream error", g.ErrCode)
		}
	}
}
