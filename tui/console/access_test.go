package console

import (
	"net/http"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
	"github.com/byoc-dev/byoc/tui/supportshell"
)

func connWith(context string, grants ...*imsv1.RoleGrant) *Conn {
	return &Conn{Context: context, Server: "https://" + context + ".example.com", Access: NewAccess(grants),
		Client: imsv1connect.NewOperatorServiceClient(http.DefaultClient, "http://127.0.0.1:1")}
}

// footer is the screen's last line.
func footer(m *Model) string {
	s := strings.TrimRight(screen(m), "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}

// The keys of dangerous actions follow the role on the selected row's
// install: an operator on acme only has the action key on acme's row and
// not on globex's, and it works on the one and does nothing on the
// other.
func TestKeysFollowTheRolesOnTheSelectedInstall(t *testing.T) {
	m := newTestModel(t, Options{Conn: connWith("prod", &imsv1.RoleGrant{Role: imsv1.Role_ROLE_OPERATOR, Scope: "install:acme"})})
	feed(m, snapshot())
	if sel := m.top().(*fleetView).Selected(); sel.name != "acme" {
		t.Fatalf("the cursor starts on %q, want acme", sel.name)
	}
	if f := footer(m); !strings.Contains(f, "a action") {
		t.Errorf("acme's row: the footer lacks the action key: %q", f)
	}
	press(m, "down")
	if sel := m.top().(*fleetView).Selected(); sel.name != "globex" {
		t.Fatalf("down moved to %q, want globex", sel.name)
	}
	if f := footer(m); strings.Contains(f, "a action") {
		t.Errorf("globex's row: the footer shows the action key: %q", f)
	}
	press(m, "a")
	if _, ok := m.top().(*actionsView); ok {
		t.Fatal("a opened the actions of globex, where the caller has no role")
	}
	press(m, "up", "a")
	if _, ok := m.top().(*actionsView); !ok {
		t.Fatal("a did not open the actions of acme")
	}

	// A support grant by label: break-glass on the canary ring only.
	sup := newTestModel(t, Options{Conn: connWith("prod", &imsv1.RoleGrant{Role: imsv1.Role_ROLE_SUPPORT, Scope: "selector:ring=canary"})})
	feed(sup, snapshot())
	if !sup.km.Bound(ActBreakGlass) || sup.km.Bound(ActCancelJob) {
		t.Errorf("support on acme's row: break-glass bound %v, cancel bound %v; want true, false",
			sup.km.Bound(ActBreakGlass), sup.km.Bound(ActCancelJob))
	}
	press(sup, "down")
	if sup.km.Bound(ActBreakGlass) {
		t.Error("support on globex's row (ring=prod): break-glass still bound")
	}
}

// :ctx recomputes the keys for the new context's grants, both ways.
func TestKeysFollowTheContext(t *testing.T) {
	viewer := connWith("prod", &imsv1.RoleGrant{Role: imsv1.Role_ROLE_VIEWER})
	admin := connWith("staging", &imsv1.RoleGrant{Role: imsv1.Role_ROLE_ADMIN})
	m := newTestModel(t, Options{Conn: viewer})
	feed(m, snapshot())
	if f := footer(m); strings.Contains(f, "a action") {
		t.Fatalf("a viewer's footer shows the action key: %q", f)
	}
	m.Update(ctxMsg{conn: admin})
	feed(m, snapshot())
	// (the footer shows the switch's status line now)
	if !m.km.Bound(ActRunAction) {
		t.Error("after :ctx to an admin context the action key is unbound")
	}
	if !m.km.Bound(ActCancelJob) {
		t.Error("after :ctx to an admin context cancel is unbound")
	}
	m.Update(ctxMsg{conn: viewer})
	feed(m, snapshot())
	if m.km.Bound(ActRunAction) {
		t.Error("after :ctx back to the viewer context the action key is bound")
	}
	press(m, "a")
	if _, ok := m.top().(*actionsView); ok {
		t.Fatal("a opened the actions for a viewer after :ctx")
	}
}

// The support-shell key follows SupportShell's rule (break-glass on the
// install): support and admin see it on the install, in the footer and
// on the help screen, and it asks for the install's name; viewer and
// operator, and support scoped to another install, do not have it.
func TestSupportShellKeyFollowsTheRoles(t *testing.T) {
	for _, tc := range []struct {
		role  imsv1.Role
		scope string
		want  bool
	}{
		{imsv1.Role_ROLE_VIEWER, "", false},
		{imsv1.Role_ROLE_OPERATOR, "", false},
		{imsv1.Role_ROLE_SUPPORT, "install:acme", true},
		{imsv1.Role_ROLE_SUPPORT, "install:globex", false},
		{imsv1.Role_ROLE_ADMIN, "", true},
	} {
		m := newTestModel(t, Options{Conn: connWith("prod", &imsv1.RoleGrant{Role: tc.role, Scope: tc.scope})})
		m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
		feed(m, snapshot())
		press(m, "enter")
		if _, ok := m.top().(*installView); !ok {
			t.Fatalf("%s: enter did not open acme", tc.role)
		}
		if got := m.km.Bound(ActSupportShell); got != tc.want {
			t.Errorf("%s on %q: support shell bound %v, want %v", tc.role, tc.scope, got, tc.want)
		}
		if got := strings.Contains(footer(m), "e shell"); got != tc.want {
			t.Errorf("%s on %q: footer shows the shell key %v, want %v: %q", tc.role, tc.scope, got, tc.want, footer(m))
		}
		press(m, "?")
		if got := strings.Contains(screen(m), "open a support shell"); got != tc.want {
			t.Errorf("%s on %q: help lists the shell key %v, want %v", tc.role, tc.scope, got, tc.want)
		}
		press(m, "?", "e")
		if got := m.confirm != nil && m.confirm.typed == "acme"; got != tc.want {
			t.Errorf("%s on %q: e asked for the install's name %v, want %v", tc.role, tc.scope, got, tc.want)
		}
		if tc.want {
			mustContain(t, screen(m), "Confirm: open a support shell on acme under break-glass", "no live break-glass grant of yours on acme")
			// The session's end shows in the status line once the console is back.
			m.confirm = nil
			m.shellGen = 7
			m.Update(shellEndedMsg{gen: 7, install: "acme", res: &supportshell.Result{SessionID: "ss_1",
				Ended: &imsv1.SupportShellEnded{Reason: "ended: the command exited", RecordingSha256: "abc123", RecordingBytes: 812}}})
			mustContain(t, footer(m), "support session ss_1 on acme ended: the command exited; the customer's recording: sha256 abc123, 812 bytes")
		}
	}
}
