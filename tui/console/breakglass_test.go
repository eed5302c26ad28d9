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
	pending := &imsv1.BreakGlassGrant{Id: "bg_1", InstallId: "ins_acme", InstallName: "acme", Role: "debugger", State: "pending", RequestedBy: "ops", DurationSeconds: 1800}
	m.Update(requestedMsg{grant: pending})
	m.Update(grantsMsg{gen: m.bg.pollGen, install: "ins_acme", me: "ops", grants: []*imsv1.BreakGlassGrant{pending}})
	// The customer's command as agentd takes it where stdin is not a
	// terminal: with the role to grant and for how long, whole.
	mustContain(t, screen(m), " acme waiting for the customer's approval: agentd breakglass approve bg_1 --role debugger --for 30m ")

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
	if m.actionGen != gen || m.confirm == nil || !strings.Contains(screen(m), `You typed "y", not the install's name "acme": type it again.`) {
		t.Fatalf("y confirmed a break-glass action, or the script was thrown away: gen %d→%d\n%s", gen, m.actionGen, screen(m))
	}
	mustContain(t, screen(m), "run `echo hi` on acme under break-glass")
	press(m, "acme")
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

// With a live grant, the actions view keeps the banner; the ad-hoc script
// shows mode break_glass; an app action of mode break_glass shows it and
// asks for the install's name, after the customer's modes and a warning
// that break_glass is off there; a maintenance action asks y; a mistyped
// name asks again.
func TestBreakGlassActionsShowModesAndAskTheName(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 30))
	feed(m, snapshot())
	press(m, "enter")
	m.Update(grantsMsg{gen: m.bg.pollGen, install: "ins_acme", me: "ops", grants: []*imsv1.BreakGlassGrant{liveGrant(time.Hour)}})
	press(m, "a")
	av := m.top().(*actionsView)
	m.Update(actionsMsg{gen: av.gen, revision: 3, actions: []*imsv1.Action{
		{Name: "migrate", Mode: "maintenance", Description: "run the migrations"},
		{Name: "rotate-keys", Mode: "break_glass", Description: "rotate the signing keys"},
	}})
	s := screen(m)
	mustContain(t, s, "BREAK-GLASS on acme · role debugger")
	if !screenLine(s, "migrate", "maintenance") || !screenLine(s, "rotate-keys", "break_glass") || !screenLine(s, "ad-hoc script…", "break_glass") {
		t.Fatalf("modes in the actions list:\n%s", s)
	}

	press(m, "enter") // migrate: its own mode, y
	s = screen(m)
	mustContain(t, s, "Confirm: run action migrate on acme", "Needs permission mode: maintenance",
		"The customer's modes, as the agent last reported them: P M D ·", "y: yes")
	if strings.Contains(s, "will refuse it") || m.confirm.typed != "" {
		t.Fatalf("maintenance is on at acme: no warning, y answers:\n%s", s)
	}
	press(m, "n", "down", "enter")
	s = screen(m)
	mustContain(t, s, "Confirm: run action rotate-keys on acme (break_glass)", "Needs permission mode: break_glass",
		"The customer's modes, as the agent last reported them: P M D ·",
		"The customer has break_glass turned off: the agent will refuse it.",
		"Runs UNDER BREAK-GLASS grant bg_1", "Type the install's name (acme)")
	if m.confirm.typed != "acme" {
		t.Fatalf("a break_glass action asks y")
	}
	if press(m, "y"); av.startGen != 0 {
		t.Fatal("y started a break_glass action")
	}
	press(m, "enter", "acm", "enter")
	mustContain(t, screen(m), `You typed "acm", not the install's name "acme": type it again.`, "rotate-keys")
	if m.confirm == nil || av.startGen != 0 {
		t.Fatal("a mistyped name started it, or gave up")
	}
	if cmd := press(m, "acme", "enter"); cmd == nil || av.startGen == 0 || m.confirm != nil {
		t.Fatal("typing the name did not start it")
	}

	// Without a grant, a break_glass action says the agent will refuse it.
	m2 := newTestModel(t, Options{})
	m2.Update(teaSize(160, 30))
	feed(m2, snapshot())
	press(m2, "a")
	av2 := m2.top().(*actionsView)
	m2.Update(actionsMsg{gen: av2.gen, actions: []*imsv1.Action{{Name: "rotate-keys", Mode: "break_glass"}}})
	if !screenLine(screen(m2), "ad-hoc script…", "maintenance") {
		t.Fatalf("without a grant the script is maintenance:\n%s", screen(m2))
	}
	press(m2, "enter")
	mustContain(t, screen(m2), "You hold no live break-glass grant on acme: the agent will refuse it")
}
