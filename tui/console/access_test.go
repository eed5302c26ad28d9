package console

import (
	"net/http"
	"strings"
	"testing"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
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
