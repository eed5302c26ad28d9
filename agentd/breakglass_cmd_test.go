package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/creack/pty"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
)

// agentd breakglass: usage errors say what is wrong (exit 2); with imsd
// unreachable, list shows the grants this agent approved and revoke still
// ends the grant here (exit 1, saying imsd was not told).
func TestBreakglassCommand(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := breakglassCmd(context.Background(), args, nil, &out, &errOut, func() time.Time { return now }); code != want {
			t.Fatalf("agentd breakglass %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", dir, "grant", "x"}, `unknown command "grant"`},
		{[]string{"--state-dir", dir, "approve"}, "want 1 argument(s), got 0"},
		{[]string{"--state-dir", dir, "deny", "bg_1"}, "--reason is required"},
		{[]string{"--state-dir", dir, "revoke", "bg_1", "--for", "1m"}, "--for is for approve only"},
		{[]string{"--state-dir", dir, "deny", "bg_1", "--reason", "x", "--role", "admin"}, "--role is for approve only"},
		{[]string{"--state-dir", dir, "approve", "bg_1"}, "--role is required where stdin is not a terminal"},
		{[]string{"--state-dir", dir, "approve", "bg_1", "--role", "admin"}, "--for is required where stdin is not a terminal"},
		{[]string{"list"}, "--state-dir is required"},
	} {
		if out := run(2, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: %q, want %q", c.args, out, c.want)
		}
	}
	if out := run(1, "--state-dir", dir, "list"); !strings.Contains(out, "identity") {
		t.Fatalf("list before enrolment: %s", out)
	}

	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	imsdKey, _, _ := ed25519.GenerateKey(nil)
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{imsdKey}}); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.UpdateGrants(dir, func(gs *permissions.Grants) error {
		gs.Grants = append(gs.Grants, permissions.Grant{ID: "bg_1", Role: "debugger", RequestedBy: "ops", ApprovedBy: "alice",
			ApprovedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "list", "--state-dir", dir); !lineHas(out, "bg_1", "approved", "debugger", "alice") || !strings.Contains(out, "shown: the grants this agent approved") {
		t.Fatalf("list with imsd away:\n%s", out)
	}
	out := run(1, "revoke", "bg_1", "--state-dir", dir, "--reason", "done")
	if !strings.Contains(out, "revoked bg_1") || !strings.Contains(out, "the revocation holds in this account all the same") {
		t.Fatalf("revoke with imsd away:\n%s", out)
	}
	gs, err := permissions.LoadGrants(dir)
	if err != nil || gs.Grants[0].RevokedAt.IsZero() || gs.Grants[0].RevokeReason != "done" {
		t.Fatalf("grants after revoke: %+v, %v", gs, err)
	}
	if _, live := gs.Live(now); live {
		t.Fatal("the revoked grant is still live")
	}
	if out := run(1, "revoke", "bg_1", "--state-dir", dir); !strings.Contains(out, "already revoked") {
		t.Fatalf("second revoke: %s", out)
	}

	// A grant written by hand is refused, and no command builds on it.
	if err := os.WriteFile(permissions.GrantsPath(dir), []byte(`{"grants":[{"id":"bg_2","role":"admin","requested_by":"v","approved_by":"v","approved_at":"2026-11-23T12:00:00Z","expires_at":"2099-01-01T00:00:00Z"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "list", "--state-dir", dir); !strings.Contains(out, "breakglass.json is not signed") || !strings.Contains(out, "refuses every job") || lineHas(out, "bg_2", "approved") {
		t.Fatalf("list with a hand-written grant:\n%s", out)
	}
	if out := run(1, "revoke", "bg_2", "--state-dir", dir); !strings.Contains(out, "breakglass.json is not signed") {
		t.Fatalf("revoke of a hand-written grant: %s", out)
	}
}

// listImsd is an imsd that answers ListBreakGlass with fixed grants.
type listImsd struct {
	agentv1connect.UnimplementedAgentServiceHandler
	grants []*agentv1.BreakGlassGrant
}

func (s *listImsd) ListBreakGlass(context.Context, *connect.Request[agentv1.ListBreakGlassRequest]) (*connect.Response[agentv1.ListBreakGlassResponse], error) {
	return connect.NewResponse(&agentv1.ListBreakGlassResponse{Grants: s.grants}), nil
}

// agentd breakglass list: UNTIL says what holds now, as byoc breakglass
// list does: a live grant "in 54m", a revoked one "revoked 2m ago" (never
// its original end, still in the future), an expired one "ended 5m ago";
// whether imsd or this agent's own record knows it.
func TestBreakglassListUntil(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	srv := &listImsd{grants: []*agentv1.BreakGlassGrant{
		{Id: "bg_pend", State: "pending", Role: "r", DurationSeconds: 3600, RequestExpireTime: ts(12 * time.Minute)},
		{Id: "bg_live", State: "approved", Role: "r", ExpireTime: ts(54 * time.Minute)},
		{Id: "bg_rrev", State: "revoked", Role: "r", ExpireTime: ts(6*time.Minute + 54*time.Second), RevokeTime: ts(-2 * time.Minute)},
		{Id: "bg_rexp", State: "expired", Role: "r", ExpireTime: ts(-5 * time.Minute)},
		{Id: "bg_late", State: "approved", Role: "r", ExpireTime: ts(-time.Minute)},
		// imsd not told yet of the revocation this agent made.
		{Id: "bg_lrev", State: "approved", Role: "r", ExpireTime: ts(7 * time.Minute)},
		// A request whose text would rewrite the customer's screen (move
		// up and overwrite the role column, set the clipboard).
		{Id: "bg_esc", State: "pending", Role: "admin\x1b[2K\x1b[1A", RequestedBy: "ops\x1b]52;c;ZWNobyBwd25lZA==\x07",
			Reason:          "routine \x1b[8mhidden\x1b[0m \u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9",
			DurationSeconds: 60, RequestExpireTime: ts(time.Minute)},
		// A state that is not one (imsd's to write): shown, not obeyed.
		{Id: "bg_st", State: "approved\x1b[1A\x1b[2K\x1b]52;c;ZWNobyBwd25lZA==\x07", Role: "r", ExpireTime: ts(time.Minute)},
	}}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(srv))
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetUnencryptedHTTP2(true) // the agent's client speaks h2c
	hs.Start()
	t.Cleanup(hs.Close)

	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	imsdKey, _, _ := ed25519.GenerateKey(nil)
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: hs.URL, PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{imsdKey}}); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.UpdateGrants(dir, func(gs *permissions.Grants) error {
		gs.Grants = append(gs.Grants,
			permissions.Grant{ID: "bg_lrev", Role: "r", RequestedBy: "ops", ApprovedBy: "alice", ApprovedAt: now.Add(-time.Hour),
				ExpiresAt: now.Add(7 * time.Minute), RevokedAt: now.Add(-3 * time.Minute), RevokedBy: "alice"},
			permissions.Grant{ID: "bg_lexp", Role: "r", RequestedBy: "ops", ApprovedBy: "alice", ApprovedAt: now.Add(-time.Hour),
				ExpiresAt: now.Add(-10 * time.Minute)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := breakglassCmd(context.Background(), []string{"list", "--state-dir", dir}, nil, &out, &errOut, func() time.Time { return now }); code != 0 {
		t.Fatalf("list: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range [][]string{
		{"bg_pend", "pending", "asks 1h; request expires in 12m"},
		{"bg_live", "approved", "in 54m"},
		{"bg_rrev", "revoked", "revoked 2m ago"},
		{"bg_rexp", "expired", "ended 5m ago"},
		{"bg_late", "approved", "ended 1m ago"},
		{"bg_lrev", "revoked", "revoked 3m ago"},
		{"bg_lexp", "expired", "ended 10m ago"},
	} {
		if !lineHas(out.String(), want...) {
			t.Errorf("no line with %q in:\n%s", want, out.String())
		}
	}
	if strings.ContainsAny(out.String(), "\x1b\a") || !utf8.ValidString(out.String()) || !lineHas(out.String(), "bg_esc", "pending", "admin", "routine") ||
		!lineHas(out.String(), "bg_st", "approved") {
		t.Errorf("the vendor's text reached the terminal as it was:\n%q", out.String())
	}
	// A grant imsd calls approved that this agent never approved (imsd
	// made it) is marked as imsd's word, and said not to be honoured; the
	// agent's own are not marked.
	if !lineHas(out.String(), "bg_live", "approved*") || lineHas(out.String(), "bg_lrev", "*") ||
		!strings.Contains(out.String(), "* imsd says approved, but this agent approved no such grant") {
		t.Errorf("grants imsd alone says are approved are not told apart:\n%s", out.String())
	}
	for _, id := range []string{"bg_rrev", "bg_lrev"} {
		if lineHas(out.String(), id, "in ") || lineHas(out.String(), id, "2026-") {
			t.Errorf("revoked grant %s shows an end still to come:\n%s", id, out.String())
		}
	}
	// The call is in the egress ledger, beside the running agent's.
	out.Reset()
	if code := egressCmd([]string{"list", "--state-dir", dir}, &out, &errOut, time.Now); code != 0 || !lineHas(out.String(), "list_break_glass") {
		t.Fatalf("agentd egress list: exit %d, want the list_break_glass call:\n%s%s", code, out.String(), errOut.String())
	}
}

// decideImsd is listImsd that also takes every decision.
type decideImsd struct {
	listImsd
	decided int
}

func (s *decideImsd) DecideBreakGlass(context.Context, *connect.Request[agentv1.DecideBreakGlassRequest]) (*connect.Response[agentv1.DecideBreakGlassResponse], error) {
	s.decided++
	return connect.NewResponse(&agentv1.DecideBreakGlassResponse{Grant: s.grants[0]}), nil
}

// A grant lasts at most 24 hours whatever the vendor's server says the
// request asked: approving a request it says asks for ten years, without
// --for, is refused on the customer's side (imsd not told, no grant
// kept); with --for 24h or less it is approved for that.
func TestBreakglassApproveCapsTheDuration(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	srv := &decideImsd{listImsd: listImsd{grants: []*agentv1.BreakGlassGrant{
		{Id: "bg_long", State: "pending", Role: "admin", RequestedBy: "ops", DurationSeconds: 10 * 365 * 24 * 3600,
			RequestExpireTime: timestamppb.New(now.Add(10 * time.Minute))},
	}}}
	dir := bgImsd(t, srv)
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := breakglassCmd(context.Background(), append(args, "--state-dir", dir), nil, &out, &errOut, func() time.Time { return now })
		return code, out.String() + errOut.String()
	}
	if code, out := run("approve", "bg_long", "--role", "admin", "--for", "25h"); code != 1 || !strings.Contains(out, "--for 25h0m0s is longer than the 24h0m0s a grant may last") {
		t.Fatalf("approve of a request for ten years: exit %d\n%s", code, out)
	}
	if gs, err := permissions.LoadGrants(dir); err != nil || len(gs.Grants) != 0 || srv.decided != 0 {
		t.Fatalf("after the refused approval: grants %+v (%v), %d decisions sent", gs, err, srv.decided)
	}
	if code, out := run("approve", "bg_long", "--role", "admin", "--for", "2h"); code != 0 {
		t.Fatalf("approve --for 2h: exit %d\n%s", code, out)
	}
	gs, err := permissions.LoadGrants(dir)
	if err != nil || len(gs.Grants) != 1 || !gs.Grants[0].ExpiresAt.Equal(now.Add(2*time.Hour)) {
		t.Fatalf("grants after approve --for 2h: %+v, %v", gs, err)
	}
}

// bgImsd starts srv as the install's imsd and enrols an agent with it in
// a new state directory, which it returns.
func bgImsd(t *testing.T, srv agentv1connect.AgentServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(srv))
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	t.Cleanup(hs.Close)
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	imsdKey, _, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: hs.URL, PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{imsdKey}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The role a grant gives comes from the vendor's server, which may
// report another one at approve than list showed: approve grants only
// the role the customer names. With --role, a request asking for
// another role is refused (imsd not told, no grant kept); on a terminal
// approve shows the request and grants it only when its role is typed
// back; with neither, nothing is asked of imsd.
func TestBreakglassApproveGrantsOnlyTheRoleNamed(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	srv := &decideImsd{listImsd: listImsd{grants: []*agentv1.BreakGlassGrant{
		{Id: "bg_1", State: "pending", Role: "admin", RequestedBy: "ops", Reason: "INC-7", DurationSeconds: 3600,
			RequestExpireTime: timestamppb.New(now.Add(10 * time.Minute))},
	}}}
	dir := bgImsd(t, srv)
	run := func(stdin io.Reader, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := breakglassCmd(context.Background(), append(args, "--state-dir", dir), stdin, &out, &errOut, func() time.Time { return now })
		return code, out.String() + errOut.String()
	}
	nothingDecided := func(what string) {
		t.Helper()
		if gs, err := permissions.LoadGrants(dir); err != nil || len(gs.Grants) != 0 || srv.decided != 0 {
			t.Fatalf("after %s: grants %+v (%v), %d decisions sent", what, gs, err, srv.decided)
		}
	}
	// The customer saw "viewer" in list; imsd now says "admin".
	if code, out := run(nil, "approve", "bg_1", "--role", "viewer", "--for", "10m"); code != 1 || !strings.Contains(out, `asks for role "admin", not "viewer": nothing was decided`) {
		t.Fatalf("approve --role viewer of an admin request: exit %d\n%s", code, out)
	}
	nothingDecided("approve --role viewer")
	if code, out := run(strings.NewReader("admin\n"), "approve", "bg_1"); code != 2 || !strings.Contains(out, "--role is required") {
		t.Fatalf("approve without --role, stdin not a terminal: exit %d\n%s", code, out)
	}
	nothingDecided("approve without --role")
	// Nor the duration: imsd could report a longer one than list showed.
	if code, out := run(strings.NewReader("admin\n"), "approve", "bg_1", "--role", "admin"); code != 2 || !strings.Contains(out, "--for is required") {
		t.Fatalf("approve without --for, stdin not a terminal: exit %d\n%s", code, out)
	}
	nothingDecided("approve without --for")

	// On a terminal: the request is shown, a wrong answer cancels.
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	screen := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				screen <- b.String()
				return
			}
		}
	}()
	if _, err := ptmx.Write([]byte("viewer\nadmin\n")); err != nil {
		t.Fatal(err)
	}
	code, out := run(tty, "approve", "bg_1", "--for", "30m")
	if code != 1 || !strings.Contains(out, `approval of bg_1 cancelled: "viewer" typed, not the role "admin"; nothing was decided`) ||
		!strings.Contains(out, "role:         admin") || !strings.Contains(out, "reason:       INC-7") || !strings.Contains(out, "Type the role (admin) to approve it") {
		t.Fatalf("approve on a terminal, viewer typed: exit %d\n%s", code, out)
	}
	nothingDecided("a cancelled approval")
	// The next line typed, the role, approves.
	code, out = run(tty, "approve", "bg_1", "--for", "30m")
	if code != 0 || !strings.Contains(out, "approved bg_1: role admin for 30m0s") {
		t.Fatalf("approve on a terminal, admin typed: exit %d\n%s", code, out)
	}
	gs, err := permissions.LoadGrants(dir)
	if err != nil || len(gs.Grants) != 1 || gs.Grants[0].Role != "admin" || srv.decided != 1 {
		t.Fatalf("grants after the approval: %+v, %v, %d decisions", gs, err, srv.decided)
	}
	tty.Close()
	ptmx.Close()
	<-screen
}
