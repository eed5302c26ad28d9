package server

import (
	"context"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/auth"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// startServer runs an imsd on SQLite in a temp dir; before, when set, can
// change it before it serves.
func startServer(t *testing.T, log *slog.Logger, before func(*Server)) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// A panic in the h2c listener's sniff ends that connection only: logged
// with its stack, counted in /metrics, and imsd goes on serving.
func TestSniffPanicContained(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	panicking := make(chan bool, 1)
	panicking <- true
	s := startServer(t, log, func(s *Server) {
		s.testHookSniff = func() {
			select {
			case <-panicking:
				panic("sniff test panic")
			default:
			}
		}
	})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	if n, err := c.Read(make([]byte, 100)); err == nil {
		t.Fatalf("read %d bytes from a connection whose sniff panicked; want it closed", n)
	}
	// imsd lives on, and says so in /metrics.
	r, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), "\nbyoc_agentwire_panics_total 1\n") {
		t.Errorf("/metrics lacks byoc_agentwire_panics_total 1:\n%s", grepLines(string(b), "panics"))
	}
	out := logs.String()
	for _, want := range []string{"panic contained to its connection", "sniff test panic", "server.(*h2cListener).sniff"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The largest hello an agent sends (capacity 1,000, every slot running a
// job, a 255-byte host name) fits in what agentwire reads before the
// agent is authenticated.
func TestLargestHelloFits(t *testing.T) {
	h := &agentv1.Hello{
		AgentId:   auth.NewID("agt_"),
		Signature: make([]byte, 64),
		Capacity:  1000,
		Version:   strings.Repeat("v", 64),
		Hostname:  strings.Repeat("h", 255),
	}
	for range 1000 {
		h.Running = append(h.Running, &agentv1.RunningJob{JobId: auth.NewSortableID("job_", time.Now()), FencingToken: 1<<63 - 1})
	}
	n := proto.Size(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Hello{Hello: h}})
	t.Logf("largest hello: %d bytes; limit %d", n, agentHelloMax)
	if n > agentHelloMax*3/4 {
		t.Fatalf("the largest hello is %d bytes: too near the limit of %d", n, agentHelloMax)
	}
}
