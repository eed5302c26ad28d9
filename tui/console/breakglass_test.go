package console

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// liveGrant is ops's grant on acme, approved by alice, ending in left.
func liveGrant(left time.Duration) *imsv1.BreakGlassGrant {
	return &imsv1.BreakGlassGrant{Id: "bg_1", InstallId: "ins_acme", InstallName: "acme", Role: "debugger", State: "approved",
		RequestedBy: "ops", DecidedBy: "alice", ExpireTime: timestamppb.New(clock.Add(left))}
}

// From an install, b asks for the role, reason and duration; the request's
// state shows in the header until it is approved; then the warning banner
// counts down, an action needs the install's name typed and runs as
// break_glass, and the banner goes the second the grant ends.
func TestBreakGlassInTheConsole(t *testing.T) {
	now := clock
	m := newTestModel(t, Options{Now: func() time.Time { return now }})
	feed(m, snapshot())
	press(m, "enter")
	if m.viewedInstall() != "ins_acme" {
		t.Fatalf("looking at %q", m.viewedInstall())
	}
	if cmd := press(m, "b"); cmd == nil {
		t.Fatal("b asked imsd for nothing")
	}
	mustContain(t, screen(m), "Request break-glass on acme", "reading the app's break_glass.toml")
	m.Update(policyMsg{gen: m.bg.policyGen, policy: &imsv1.GetBreakGlassPolicyResponse{MaxDurationSeconds: 7200, RequireReason: true,
		Roles: []*imsv1.BreakGlassRole{{Name: "debugger", Description: "Read logs."}, {Name: "admin", Description: "Everything."}}}})
	mustContain(t, screen(m), "Choose a role", "› debugger", "admin  Everything.")
	press(m, "down", "up", "enter")
	mustContain(t, screen(m), "role:     debugger", "Type the reason below (required")
	press(m, "enter")
	if !strings.Contains(m.status, "a reason is required") || m.mode != inputBGReason {
		t.Fatalf("an empty reason went through: mode %v, status %q", m.mode, m.status)
	}
	press(m, "INC-42", "enter")
	s := screen(m)
	mustContain(t, s, "Choose how long", "15m", "30m", "› 1h", "2h")
	if strings.Contains(s, "4h") {
		t.Fatalf("a duration past max_duration is offered:\n%s", s)
	}
	if cmd := press(m, "up", "enter"); cmd == nil {
		t.Fatal("no request sent")
	}
	if m.bg.role != "debugger" || m.bg.reason != "INC-42" || m.mode != inputNone {
		t.Fatalf("request fields: %+v", m.bg)
	}
	pending := &imsv1.BreakGlassGrant{Id: "bg_1", InstallId: "ins_acme", InstallName: "acme", Role: "debugger", State: "pending", RequestedBy: "ops"}
	m.Update(requestedMsg{grant: pending})
	m.Update(grantsMsg{gen: m.bg.pollGen, install: "ins_acme", me: "ops", grants: []*imsv1.BreakGlassGrant{pending}})
	mustContain(t, screen(m), "break-glass bg_1 on acme: waiting for the customer's approval")

	m.Update(grantsMsg{gen: m.bg.pollGen, install: "ins_acme", me: "ops", grants: []*imsv1.BreakGlassGrant{liveGrant(90 * time.Second)}})
	s = screen(m)
	mustContain(t, s, "BREAK-GLASS on acme · role debugger · approved by alice · 01:30 left", "break-glass bg_1 approved by alice")
	now = now.Add(31 * time.Second)
	m.Update(tickMsg{})
	mustContain(t, screen(m), "00:59 left")

	// Someone else's grant is not the operator's.
	other := liveGrant(time.Hour)
	other.RequestedBy = "someone-else"
	if m2 := newTestModel(t, Options{}); true {
		feed(m2, snapshot())
		press(m2, "enter")
		m2.bg = bgState{me: "ops", grants: map[string][]*imsv1.BreakGlassGrant{"ins_acme": {other}}}
		if strings.Contains(screen(m2), "BREAK-GLASS") {
			t.Fatalf("another operator's grant shows a banner:\n%s", screen(m2))
		}
	}

	press(m, "a", "enter", "echo hi", "enter")
	s = screen(m)
	mustContain(t, s, "under break-glass", "Runs UNDER BREAK-GLASS grant bg_1", "Type the install's name (acme)")
	gen := m.actionGen
	press(m, "y", "enter")
	if m.actionGen != gen || m.confirm != nil || !strings.Contains(m.status, `you typed "y", not the install's name "acme"`) {
		t.Fatalf("y confirmed a break-glass action: gen %d→%d, status %q", gen, m.actionGen, m.status)
	}
	press(m, "a", "enter", "echo hi", "enter", "acme")
	cmd := press(m, "enter")
	if m.actionGen == gen || cmd == nil {
		t.Fatal("typing the install's name did not start the action")
	}

	now = now.Add(59 * time.Second)
	m.Update(tickMsg{})
	if s := screen(m); strings.Contains(s, "BREAK-GLASS") {
		t.Fatalf("the banner outlived the grant:\n%s", s)
	}
	press(m, "a", "enter", "echo hi", "enter")
	if m.confirm == nil || m.confirm.typed != "" {
		t.Fatalf("after the grant, the action still needs the name typed: %+v", m.confirm)
	}
}

// --readonly never offers break-glass.
func TestReadOnlyOffersNoBreakGlass(t *testing.T) {
	m := newTestModel(t, Options{ReadOnly: true})
	feed(m, snapshot())
	press(m, "enter", "b")
	if m.mode != inputNone || strings.Contains(screen(m), "Request break-glass") {
		t.Fatalf("read-only console started a break-glass request:\n%s", screen(m))
	}
	if strings.Contains(strings.Join(m.km.HelpLines(), "\n"), "break-glass") {
		t.Fatal("read-only help lists break-glass")
	}
}
