package operatorapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
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

func newRelayEnv(t *testing.T) *relayEnv { return newRelayEnvAuth(t, nil, "") }

// newRelayEnvAuth is newRelayEnv with its calls through the
// Authenticator newAuth makes over the store (nil: the caller is an
// admin token, no check), presenting bearer.
func newRelayEnvAuth(t *testing.T, newAuth func(*store.Store) *Authenticator, bearer string) *relayEnv {
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
	var opts []connect.HandlerOption
	var authn *Authenticator
	if newAuth != nil {
		authn = newAuth(st)
		opts = append(opts, connect.WithInterceptors(authn))
	}
	_, h := imsv1connect.NewOperatorServiceHandler(svc, opts...)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if authn != nil {
			r.Header.Set("Authorization", "Bearer "+bearer)
			h.ServeHTTP(w, r)
			return
		}
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

// fakeSSO verifies any ID token as ann's, with support on every
// install, until expires (by now).
type fakeSSO struct {
	now     func() time.Time
	expires time.Time
}

func (f fakeSSO) Principal(_ context.Context, _ string) (access.Principal, error) {
	if !f.now().Before(f.expires) {
		return access.Principal{}, errors.New("the session expired")
	}
	return access.Principal{Kind: "user", ID: "ann", Name: "ann@example.com", Expires: f.expires,
		Grants: []access.Grant{{Role: access.Support, Source: "group support"}}}, nil
}

// A session opened with a single sign-on ID token ends when that token
// expires, as one opened with an API token ends at its revocation: the
// operator is told why, nothing more reaches the shell, and imsd asks
// the agent to close it. Before the expiry it runs on.
func TestSupportShellEndsWhenItsIDTokenExpires(t *testing.T) {
	var clock atomic.Int64
	t0 := time.Now()
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	e := newRelayEnvAuth(t, func(st *store.Store) *Authenticator {
		return NewAuthenticator(st, now, fakeSSO{now: now, expires: t0.Add(time.Hour)}, nil)
	}, "aaa.bbb.ccc")
	st, id := e.open(t)
	e.event(t, "agt-acme", &agentv1.ShellEvent{SessionId: id, Opened: &agentv1.ShellOpened{GrantId: "bg_1"}})
	if m, err := st.Receive(); err != nil || m.Started == nil {
		t.Fatalf("first message: %v %v", m, err)
	}
	// Rechecked every second: still allowed a while before the expiry.
	time.Sleep(1500 * time.Millisecond)
	select {
	case m := <-e.pushed:
		t.Fatalf("imsd pushed %v before the ID token expired", m)
	default:
	}
	clock.Store(t0.Add(time.Hour).UnixNano())
	got := make(chan string, 1)
	go func() {
		m, err := st.Receive()
		got <- fmt.Sprint(m.GetEnded().GetReason(), err)
	}()
	select {
	case r := <-got:
		if !strings.Contains(r, "ID token this stream was opened with expired") {
			t.Fatalf("after the ID token's expiry: %s", r)
		}
	case <-time.After(5 * time.Second):
		// The operator leaves, so that the call ends and the server closes.
		st.CloseRequest()
		st.CloseResponse()
		t.Fatal("the session outlived its ID token by 5s")
	}
	select {
	case m := <-e.pushed:
		if !m.GetShellInput().GetClose() {
			t.Fatalf("imsd pushed %v, want a close", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("imsd did not ask the agent to close the session")
	}
}

// A kept recording altered in the database is refused at replay even
// when the alteration rewrote the row's sha256 column with its new
// bytes' hash: the SHA-256 GetSupportRecording gives the caller to check
// is the one the install's hash-chained audit recorded when imsd kept
// it. A row put in the table without that record (a forged recording) is
// not sent at all.
func TestSupportRecordingTamperedRowAndHash(t *testing.T) {
	e := newRelayEnv(t)
	ctx := context.Background()
	orig := []byte(`{"version":2,"width":80,"height":24,"timestamp":1795000000,"title":"byoc support session ss_1 by ops"}` + "\n" + `[0.1,"o","$ id\r\n"]` + "\n")
	sum := sha256.Sum256(orig)
	if err := e.st.SaveSessionRecording(ctx, store.SessionRecording{SessionID: "ss_1", InstallID: "inst-acme", AgentID: "agt-acme",
		SHA256: hex.EncodeToString(sum[:]), Data: orig, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	get := func(id string) (*imsv1.GetSupportRecordingResponse, error) {
		r, err := e.client.GetSupportRecording(ctx, connect.NewRequest(&imsv1.GetSupportRecordingRequest{Id: id}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}
	r, err := get("ss_1")
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(r.Data); hex.EncodeToString(got[:]) != r.Recording.Sha256 {
		t.Fatalf("an untouched recording does not match its SHA-256")
	}

	forged := []byte(strings.Replace(string(orig), "$ id", "$ ok", 1))
	fsum := sha256.Sum256(forged)
	if err := e.st.RawExec(ctx, `UPDATE support_session_recordings SET data = ?, sha256 = ? WHERE session_id = ?`,
		forged, hex.EncodeToString(fsum[:]), "ss_1"); err != nil {
		t.Fatal(err)
	}
	r, err = get("ss_1")
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(r.Data); hex.EncodeToString(got[:]) == r.Recording.Sha256 {
		t.Fatalf("a recording rewritten with its column passes the caller's check (SHA-256 %s)", r.Recording.Sha256)
	}
	if r.Recording.Sha256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("SHA-256 given %s, want the kept one %x", r.Recording.Sha256, sum)
	}

	if err := e.st.RawExec(ctx, `INSERT INTO support_session_recordings (session_id, install_id, agent_id, sha256, size, data, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, "ss_2", "inst-acme", "agt-acme", hex.EncodeToString(fsum[:]), len(forged), forged, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if _, err := get("ss_2"); err == nil || !strings.Contains(err.Error(), "ss_2") || !strings.Contains(err.Error(), "tampered") {
		t.Fatalf("a recording with no kept record: %v", err)
	}
}
