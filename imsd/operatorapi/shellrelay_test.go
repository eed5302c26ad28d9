package operatorapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// relayEnv is SupportShell served over HTTP/2 on loopback with a real
// store and hub, and a fake agent stream registered in the hub: what
// imsd pushes to the agent arrives on pushed, and the test plays the
// agent's events through the hub as agentapi does.
type relayEnv struct {
	st     *store.Store
	hub    *dispatch.Hub
	pushed chan *agentv1.ConnectResponse
	client imsv1connect.OperatorServiceClient
}

func newRelayEnv(t *testing.T) *relayEnv {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "imsd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Now()
	if err := st.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"acme", "other"} {
		if err := st.CreateInstall(ctx, store.Install{ID: "inst-" + in, AppID: "app-1", Name: in, CreatedAt: t0},
			store.EnrollmentToken{Hash: "h-" + in, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	e := &relayEnv{st: st, hub: dispatch.NewHub(), pushed: make(chan *agentv1.ConnectResponse, 64)}
	sess := e.hub.Register("agt-acme", "inst-acme", dispatch.Handlers{Push: func(m any) error {
		e.pushed <- m.(*agentv1.ConnectResponse)
		return nil
	}})
	t.Cleanup(func() { e.hub.Unregister(sess) })
	svc := New(st, e.hub, Config{}, time.Now, slog.New(slog.DiscardHandler))
	_, h := imsv1connect.NewOperatorServiceHandler(svc)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := access.Principal{Kind: "token", ID: "tok-1", Name: "ops", Grants: []access.Grant{{Role: access.Admin}}}
		h.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), p)))
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	e.client = imsv1connect.NewOperatorServiceClient(&http.Client{Transport: tr}, srv.URL)
	return e
}

// open starts a session on acme and returns the stream and the id imsd
// gave it (from its ShellOpen to the agent).
func (e *relayEnv) open(t *testing.T) (*connect.BidiStreamForClient[imsv1.SupportShellRequest, imsv1.SupportShellResponse], string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st := e.client.SupportShell(ctx)
	if err := st.Send(&imsv1.SupportShellRequest{Install: "acme", Open: &imsv1.SupportShellOpen{Size: &imsv1.TerminalSize{Rows: 24, Cols: 80}, Term: "xterm"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-e.pushed:
		if m.GetShellOpen() == nil {
			t.Fatalf("imsd pushed %v first, not a shell open", m)
		}
		return st, m.GetShellOpen().SessionId
	case <-time.After(10 * time.Second):
		t.Fatal("imsd pushed no shell open to the agent")
		return nil, ""
	}
}

func (e *relayEnv) event(t *testing.T, agentID string, ev *agentv1.ShellEvent) bool {
	t.Helper()
	return e.hub.ShellEvent(agentID, ev.SessionId, ev)
}

// The agent's events reach only the session's own call: an agent of
// another install (or any other agent) that names the session is
// dropped; an agent that says "opened" twice gets one start, audited
// once (a second closed a closed channel: the call broke, with no end
// and no end record); and the session ends with the agent's end.
func TestSupportShellRelayAgentEvents(t *testing.T) {
	e := newRelayEnv(t)
	st, id := e.open(t)
	if e.event(t, "agt-other", &agentv1.ShellEvent{SessionId: id, Output: []byte("forged\r\n")}) {
		t.Fatal("another agent's output was taken for the session")
	}
	opened := &agentv1.ShellEvent{SessionId: id, Opened: &agentv1.ShellOpened{GrantId: "bg_1"}}
	e.event(t, "agt-acme", opened)
	e.event(t, "agt-acme", opened)
	e.event(t, "agt-acme", &agentv1.ShellEvent{SessionId: id, Output: []byte("$ ")})
	e.event(t, "agt-acme", &agentv1.ShellEvent{SessionId: id, Ended: &agentv1.ShellEnded{Reason: "ended: exit", RecordingSha256: "ab"}})
	var started, ended int
	var out string
	for {
		m, err := st.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the session broke: %v (started %d, output %q)", err, started, out)
		}
		if m.Started != nil {
			started++
		}
		if m.Ended != nil {
			ended++
		}
		out += string(m.Output)
	}
	if started != 1 || ended != 1 || out != "$ " {
		t.Fatalf("started %d, ended %d, output %q; want 1, 1, %q", started, ended, out, "$ ")
	}
	evs, err := e.st.ListAuditEvents(context.Background(), store.AuditFilter{Chain: "inst-acme", OneChain: true})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
	}
	if kinds["support.session.started"] != 1 || kinds["support.session.ended"] != 1 {
		t.Fatalf("audit: %v", kinds)
	}
}
