package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// The agent stream behaves the same whether imsd's agent-wire server
// serves it (Connect protocol, the stream first on its connection) or the
// standard stack does (gRPC protocol; or a Connect stream on a connection
// that served another request first): same welcome, same errors, word for
// word.
func TestAgentStreamSameOnEveryPath(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	type result struct{ forged, idle string }
	var results []result
	for _, path := range []string{"agentwire", "grpc", "shared connection"} {
		t.Run(path, func(t *testing.T) {
			_, tok := cluster.NewInstall(t, ims.Admin(), "shop", strings.ReplaceAll(path, " ", "-"))
			key, _ := identity.NewKey()
			hc := agent.DefaultHTTPClient()
			var opts []connect.ClientOption
			if path == "grpc" {
				opts = append(opts, connect.WithGRPC())
			}
			c := agentv1connect.NewAgentServiceClient(hc, ims.URL(), opts...)
			er, err := c.Enroll(context.Background(), connect.NewRequest(&agentv1.EnrollRequest{EnrollmentToken: tok, PublicKey: key.Public().(ed25519.PublicKey)}))
			if err != nil {
				t.Fatal(err)
			}
			if path != "shared connection" {
				hc.CloseIdleConnections()
			}
			open := func(sign func(nonce []byte) []byte) (*connect.BidiStreamForClient[agentv1.ConnectRequest, agentv1.ConnectResponse], error) {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				st := c.Connect(ctx)
				st.Send(nil)
				m, err := st.Receive()
				if err != nil {
					t.Fatalf("challenge: %v", err)
				}
				cs, err := agentchannel.Dial(st, m.GetChallenge(), key, er.Msg.AgentId, nil, &agentv1.Hello{
					AgentId: er.Msg.AgentId, Signature: sign(m.GetChallenge().Nonce), Capacity: 2,
				})
				if err != nil {
					return st, err
				}
				m, err = cs.Receive()
				if err == nil && m.GetWelcome() == nil {
					t.Fatalf("expected a welcome, got %v", m)
				}
				return st, err
			}
			other, _ := identity.NewKey()
			_, err = open(func(n []byte) []byte { return ed25519.Sign(other, n) })
			var r result
			r.forged = err.Error()
			wantCode(t, err, connect.CodeUnauthenticated, "bad signature")
			st, err := open(func(n []byte) []byte { return agentproto.SignChallenge(key, er.Msg.AgentId, n) })
			if err != nil {
				t.Fatal(err)
			}
			// Silent past three heartbeats (600ms): cut off.
			_, err = st.Receive()
			wantCode(t, err, connect.CodeDeadlineExceeded, "no message from the agent")
			r.idle = err.Error()
			results = append(results, r)
		})
	}
	for _, r := range results[1:] {
		if r != results[0] {
			t.Fatalf("errors differ between paths: %q vs %q", r, results[0])
		}
	}
}

// A connection whose first request is not the agent stream is served by
// the standard stack, on the same port, over h2c.
func TestNonAgentFirstRequestOverH2C(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	r, err := agent.DefaultHTTPClient().Get(ims.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.ProtoMajor != 2 || string(b) != "ok\n" {
		t.Fatalf("got %s %q, want HTTP/2 ok", r.Proto, b)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	r1, err := (&http.Client{Transport: &http.Transport{Protocols: p}}).Get(ims.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	r1.Body.Close()
	if r1.ProtoMajor != 1 || r1.StatusCode != 200 {
		t.Fatalf("HTTP/1: %s %d", r1.Proto, r1.StatusCode)
	}
}

// An idle agent costs imsd one goroutine: the agent-wire connection's
// reader, which runs the stream.
func TestIdleAgentHoldsOneGoroutine(t *testing.T) {
	ims := cluster.StartIMS(t, cluster.Options{}) // heartbeats every 10s: the agents stay idle
	warm := cluster.EnrollRaw(t, ims.URL(), newToken(t, ims, "warm"))
	warm.Connect(t, 1)
	const n = 20
	agents := make([]*cluster.RawAgent, n)
	for i := range agents {
		agents[i] = cluster.EnrollRaw(t, ims.URL(), newToken(t, ims, "a"+string(rune('a'+i))))
	}
	settle := func() int {
		var last, got int
		for range 100 {
			time.Sleep(30 * time.Millisecond)
			if got = imsdGoroutines(); got == last {
				return got
			}
			last = got
		}
		return got
	}
	before := settle()
	for _, a := range agents {
		a.Connect(t, 1)
	}
	after := settle()
	if after-before != n {
		t.Fatalf("%d idle agents added %d goroutines in imsd; want %d", n, after-before, n)
	}
}

func newToken(t *testing.T, ims *cluster.IMS, name string) string {
	t.Helper()
	_, tok := cluster.NewInstall(t, ims.Admin(), "idle", name)
	return tok
}

// imsdGoroutines counts this process's goroutines that run imsd's or the
// HTTP/2 server's code (the clients' goroutines run neither).
func imsdGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "byoc/imsd/") || strings.Contains(g, "http2.(*serverConn)") || strings.Contains(g, "net/http.(*conn)") {
			n++
		}
	}
	return n
}

// imsd --agentwire=off: agent streams are served by the standard stack,
// the same way for the agent; on (the default) by agentwire.
func TestAgentWireOff(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "on", true: "off"}[off], func(t *testing.T) {
			o := fast
			o.AgentWireOff = off
			ims := cluster.StartIMS(t, o)
			a := cluster.EnrollRaw(t, ims.URL(), newToken(t, ims, "wire"))
			if w := a.Connect(t, 1); w.GetInstallId() == "" {
				t.Fatalf("welcome %v", w)
			}
			want := 1
			if off {
				want = 0
			}
			if got := ims.AgentWireConns(); got != want {
				t.Fatalf("agentwire serves %d connections, want %d", got, want)
			}
			if ims.Hub().Count() != 1 {
				t.Fatalf("%d agents connected, want 1", ims.Hub().Count())
			}
		})
	}
}

// Before its hello is verified, an agent stream may send at most 64 KiB,
// on either path: a larger hello is refused with resource_exhausted, and
// the largest real hello (1,000 running jobs) still passes.
func TestHelloSizeLimitOnEveryPath(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	for _, path := range []string{"agentwire", "grpc", "grpc gzip"} {
		t.Run(path, func(t *testing.T) {
			_, tok := cluster.NewInstall(t, ims.Admin(), "shop", "hello-"+strings.ReplaceAll(path, " ", "-"))
			key, _ := identity.NewKey()
			hc := agent.DefaultHTTPClient()
			var opts []connect.ClientOption
			if strings.HasPrefix(path, "grpc") {
				opts = append(opts, connect.WithGRPC())
			}
			if strings.HasSuffix(path, "gzip") {
				opts = append(opts, connect.WithSendGzip())
			}
			c := agentv1connect.NewAgentServiceClient(hc, ims.URL(), opts...)
			er, err := c.Enroll(context.Background(), connect.NewRequest(&agentv1.EnrollRequest{EnrollmentToken: tok, PublicKey: key.Public().(ed25519.PublicKey)}))
			if err != nil {
				t.Fatal(err)
			}
			hc.CloseIdleConnections()
			hello := func(host string, running int) error {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				st := c.Connect(ctx)
				st.Send(nil)
				m, err := st.Receive()
				if err != nil {
					t.Fatalf("challenge: %v", err)
				}
				h := &agentv1.Hello{AgentId: er.Msg.AgentId, Signature: agentproto.SignChallenge(key, er.Msg.AgentId, m.GetChallenge().Nonce), Capacity: 1000, Hostname: host}
				for range running {
					h.Running = append(h.Running, &agentv1.RunningJob{JobId: auth.NewSortableID("job_", time.Now()), FencingToken: 1 << 40})
				}
				if len(host) > 255 {
					// Past what a handshake message carries: sent as one
					// by hand, to see imsd's limit.
					st.Send(&agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_ChannelHello{ChannelHello: &agentv1.ChannelHello{AgentId: h.AgentId, Noise: []byte(host)}}})
					_, err = st.Receive()
					return err
				}
				cs, err := agentchannel.Dial(st, m.GetChallenge(), key, er.Msg.AgentId, nil, h)
				if err != nil {
					return err
				}
				_, err = cs.Receive()
				return err
			}
			// Random, so that gzip cannot shrink it under the limit.
			big := make([]byte, 100<<10)
			rand.Read(big)
			wantCode(t, hello(base64.StdEncoding.EncodeToString(big), 0), connect.CodeResourceExhausted, "65536")
			if err := hello("host", 1000); err != nil {
				t.Fatalf("the largest real hello: %v", err)
			}
		})
	}
}
