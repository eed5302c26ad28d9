// Conformance, agent health: the health sweeper's reads, its conditional
// writes (recorded once however many replicas decide the same change),
// and the alert outbox.

package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func (e *env) agentHealth(id string) store.AgentHealth {
	e.t.Helper()
	all, err := e.s.ListAgentHealth(e.ctx())
	ok(e.t, err)
	for _, a := range all {
		if a.AgentID == id {
			return a
		}
	}
	e.t.Fatalf("agent %s not in ListAgentHealth", id)
	return store.AgentHealth{}
}

// testAgentHealth: an agent starts healthy; hello, condition and health
// round-trip; a change of health decided by two replicas at once is
// recorded once, with one audit event.
func testAgentHealth(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	a := e.agentHealth("ag-1")
	equal(t, "health at enrolment", a.Health, store.AgentHealthy)
	equal(t, "alerted at enrolment", a.AlertedHealth, store.AgentHealthy)
	equal(t, "install name", a.InstallName, "acme")
	if !a.LastSeenAt.IsZero() || !a.ConnectedAt.IsZero() || a.Condition != nil || !a.HealthSince.IsZero() {
		t.Fatalf("a new agent: %+v", a)
	}

	ok(t, e.s.AgentConnected(ctx, "ag-1", "v2", at(2*time.Minute)))
	ok(t, e.s.AgentConnected(ctx, "ag-1", "", at(3*time.Minute)))
	ok(t, e.s.TouchAgent(ctx, "ag-1", at(10*time.Minute)))
	ok(t, e.s.AgentConnected(ctx, "ag-1", "", at(4*time.Minute))) // late: last seen stays
	ok(t, e.s.SetAgentCondition(ctx, "ag-1", store.AgentCondition{DiskUsedPercent: 93, FailedInRow: 2}, at(4*time.Minute)))
	ok(t, e.s.RecordLateHeartbeat(ctx, "ag-1", at(5*time.Minute)))
	a = e.agentHealth("ag-1")
	equal(t, "late heartbeat at", a.LateHeartbeatAt, at(5*time.Minute))
	equal(t, "version", a.Version, "v2")
	equal(t, "connected at", a.ConnectedAt, at(4*time.Minute))
	equal(t, "last seen", a.LastSeenAt, at(10*time.Minute))
	if c := a.Condition; c == nil || c.DiskUsedPercent != 93 || c.FailedInRow != 2 || !c.ReportedAt.Equal(at(4*time.Minute)) {
		t.Fatalf("condition = %+v", c)
	}

	// Two replicas decide the same change from the same read.
	second := e.second()
	var wg sync.WaitGroup
	results := make([]bool, 2)
	for i, s := range []*store.Store{e.s, second} {
		wg.Go(func() {
			changed, err := s.SetAgentHealth(ctx, a, store.AgentOffline, "no heartbeat for more than 2m0s", at(20*time.Minute))
			if err != nil {
				t.Error(err)
			}
			results[i] = changed
		})
	}
	wg.Wait()
	if results[0] == results[1] {
		t.Fatalf("both replicas' changes = %v, want exactly one", results)
	}
	n := 0
	for _, k := range e.kinds(inst) {
		if k == "agent.health_changed" {
			n++
		}
	}
	equal(t, "agent.health_changed events", n, 1)
	// A write from a stale read changes nothing.
	changed, err := e.s.SetAgentHealth(ctx, a, store.AgentDegraded, "late", at(21*time.Minute))
	ok(t, err)
	equal(t, "changed from a stale read", changed, false)

	for _, s := range []*store.Store{e.s, second} {
		got, err := s.GetAgent(ctx, "ag-1")
		ok(t, err)
		if got.Health != store.AgentOffline || !got.HealthSince.Equal(at(20*time.Minute)) || got.HealthReason != "no heartbeat for more than 2m0s" ||
			!got.ConnectedAt.Equal(at(4*time.Minute)) || got.Condition == nil || got.Condition.DiskUsedPercent != 93 {
			t.Fatalf("agent = %+v", got)
		}
	}
	// A new reason for the same health keeps its since.
	a = e.agentHealth("ag-1")
	changed, err = e.s.SetAgentHealth(ctx, a, store.AgentOffline, "never connected", at(22*time.Minute))
	ok(t, err)
	equal(t, "reason changed", changed, true)
	a = e.agentHealth("ag-1")
	equal(t, "since after a new reason", a.HealthSince, at(20*time.Minute))
	equal(t, "reason", a.Reason, "never connected")
	_, err = e.s.SetAgentHealth(ctx, a, store.Health("sick"), "", at(23*time.Minute))
	if err == nil || !strings.Contains(err.Error(), "sick") {
		t.Fatalf("an unknown health: %v", err)
	}
}

// testAlertOutbox: an alert is recorded once from one read, with one
// outbox row per sink; one replica's claim excludes another's; delivery
// and failures are recorded.
func testAlertOutbox(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	a := e.agentHealth("ag-1")
	changed, err := e.s.SetAgentHealth(ctx, a, store.AgentOffline, "gone", at(time.Hour))
	ok(t, err)
	equal(t, "changed", changed, true)
	a = e.agentHealth("ag-1")

	second := e.second()
	al := store.Alert{ID: "al-1", AgentID: "ag-1", InstallID: inst, Health: store.AgentOffline, Body: `{"id":"al-1"}`}
	var wg sync.WaitGroup
	results := make([]bool, 2)
	for i, s := range []*store.Store{e.s, second} {
		wg.Go(func() {
			rec, err := s.RecordAlert(ctx, a, al, []string{"webhook", "slack"}, at(2*time.Hour))
			if err != nil {
				t.Error(err)
			}
			results[i] = rec
		})
	}
	wg.Wait()
	if results[0] == results[1] {
		t.Fatalf("both replicas' alerts = %v, want exactly one", results)
	}
	b := e.agentHealth("ag-1")
	if b.AlertedHealth != store.AgentOffline || !b.ProblemAlertAt.Equal(at(2*time.Hour)) || b.ProblemAlertHealth != store.AgentOffline {
		t.Fatalf("alert state = %+v", b)
	}
	// A recovery keeps the last problem alert (the de-dup window's start).
	rec, err := e.s.RecordAlert(ctx, b, store.Alert{ID: "al-2", AgentID: "ag-1", InstallID: inst, Health: store.AgentHealthy, Body: `{"id":"al-2"}`},
		[]string{"webhook"}, at(3*time.Hour))
	ok(t, err)
	equal(t, "recovery recorded", rec, true)
	c := e.agentHealth("ag-1")
	if c.AlertedHealth != store.AgentHealthy || !c.ProblemAlertAt.Equal(at(2*time.Hour)) || c.ProblemAlertHealth != store.AgentOffline {
		t.Fatalf("alert state after recovery = %+v", c)
	}

	all, err := second.ListAlertOutbox(ctx)
	ok(t, err)
	if len(all) != 3 {
		t.Fatalf("outbox = %+v, want 3 rows", all)
	}
	due, err := e.s.DueAlerts(ctx, at(2*time.Hour), 10)
	ok(t, err)
	if len(due) != 2 || due[0].Sink != "slack" || due[1].Sink != "webhook" || due[0].Body != `{"id":"al-1"}` || due[0].AlertID != "al-1" {
		t.Fatalf("due at the alert = %+v", due)
	}
	// Two replicas claim the same row: one gets it.
	c1, err := e.s.ClaimAlert(ctx, due[1], at(2*time.Hour+time.Minute))
	ok(t, err)
	c2, err := second.ClaimAlert(ctx, due[1], at(2*time.Hour+time.Minute))
	ok(t, err)
	if !c1 || c2 {
		t.Fatalf("claims = %v, %v; want true, false", c1, c2)
	}
	ok(t, e.s.AlertAttemptFailed(ctx, due[1].ID, "503 Service Unavailable", at(2*time.Hour+10*time.Second), false, at(2*time.Hour)))
	due, err = e.s.DueAlerts(ctx, at(2*time.Hour+10*time.Second), 10)
	ok(t, err)
	if len(due) != 2 || due[1].Attempts != 1 || due[1].LastError != "503 Service Unavailable" {
		t.Fatalf("due after a failure = %+v", due)
	}
	ok(t, e.s.AlertDelivered(ctx, due[1].ID, at(2*time.Hour+11*time.Second)))
	ok(t, e.s.AlertAttemptFailed(ctx, due[0].ID, "gone", at(3*time.Hour), true, at(2*time.Hour+11*time.Second)))
	due, err = e.s.DueAlerts(ctx, at(4*time.Hour), 10)
	ok(t, err)
	if len(due) != 1 || due[0].AlertID != "al-2" {
		t.Fatalf("due after delivery and giving up = %+v", due)
	}
	// Restart: the outbox is durable.
	all, err = second.ListAlertOutbox(ctx)
	ok(t, err)
	for _, o := range all {
		switch o.ID {
		case "al-1/webhook":
			if !o.DeliveredAt.Equal(at(2*time.Hour+11*time.Second)) || o.LastError != "" {
				t.Fatalf("delivered = %+v", o)
			}
		case "al-1/slack":
			if o.FailedAt.IsZero() || o.LastError != "gone" {
				t.Fatalf("given up = %+v", o)
			}
		}
	}
}

// testRevokeAgents: a revoked agent is refused from then on (the agent
// shows it), audited, and left out of health and key acknowledgements.
func testRevokeAgents(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.agent(inst, "ag-2")
	ids, err := e.s.RevokeAgents(ctx, inst, "ag-1", "stolen disk", "alice", at(time.Hour))
	ok(t, err)
	equal(t, "revoked", strings.Join(ids, ","), "ag-1")
	a, err := e.second().GetAgent(ctx, "ag-1")
	ok(t, err)
	if !a.RevokedAt.Equal(at(time.Hour)) || a.RevokedReason != "stolen disk" {
		t.Fatalf("revoked agent = %+v", a)
	}
	_, err = e.s.RevokeAgents(ctx, inst, "ag-1", "again", "alice", at(2*time.Hour))
	wantErr(t, err, errs.NotFound, "ag-1")
	// A replica holding the revoked agent's stream (another replica
	// took the revocation) learns of it when it next touches the agent.
	wantErr(t, e.second().TouchAgent(ctx, "ag-1", at(2*time.Hour)), errs.PermissionDenied, "ag-1", "revoked")
	ok(t, e.s.TouchAgent(ctx, "ag-2", at(2*time.Hour)))
	all, err := e.s.ListAgentHealth(ctx)
	ok(t, err)
	if len(all) != 1 || all[0].AgentID != "ag-2" {
		t.Fatalf("health of %+v, want ag-2 only", all)
	}
	pending, err := e.s.AgentsNotAcking(ctx, "key-2")
	ok(t, err)
	if len(pending) != 1 || pending[0].AgentID != "ag-2" {
		t.Fatalf("not acking: %+v", pending)
	}
	ok(t, e.s.AckAgentKey(ctx, "ag-2", "key-2", at(time.Hour)))
	pending, err = e.s.AgentsNotAcking(ctx, "key-2")
	ok(t, err)
	equal(t, "not acking after the ack", len(pending), 0)
	ids, err = e.s.RevokeAgents(ctx, inst, "", "all of them", "bob", at(3*time.Hour))
	ok(t, err)
	equal(t, "revoked all", strings.Join(ids, ","), "ag-2")
	n := 0
	for _, k := range e.kinds(inst) {
		if k == "agent.revoked" {
			n++
		}
	}
	equal(t, "agent.revoked events", n, 2)
}

// testAgentDisconnected: a stream's end is recorded against its own
// hello, so the replica an agent left cannot mark it gone once it has
// said hello to another, whichever write lands first; StreamMayBeOpen
// follows.
func testAgentDisconnected(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	get := func() store.Agent {
		t.Helper()
		a, err := e.s.GetAgent(ctx, "ag-1")
		ok(t, err)
		return a
	}
	window := time.Minute
	if get().StreamMayBeOpen(at(time.Minute), window) {
		t.Fatal("an agent never connected may have a stream open")
	}
	// Replica A: hello at 1m, heard at 1m30s, its stream ends at 2m.
	ok(t, e.s.AgentConnected(ctx, "ag-1", "v1", at(time.Minute)))
	if !get().StreamMayBeOpen(at(90*time.Second), window) {
		t.Fatal("a stream just opened is not shown open")
	}
	ok(t, e.s.AgentDisconnected(ctx, "ag-1", at(time.Minute), at(90*time.Second), at(2*time.Minute)))
	a := get()
	equal(t, "disconnected at", a.DisconnectedAt, at(2*time.Minute))
	equal(t, "last seen at the end", a.LastSeenAt, at(90*time.Second))
	if a.StreamMayBeOpen(at(2*time.Minute), window) {
		t.Fatal("a stream whose end was recorded is shown open, within the last-seen window")
	}

	// The agent moves: hello at replica B at 3m, then replica A, which
	// held the stream of the hello at 2m30s, records its end late.
	ok(t, e.s.AgentConnected(ctx, "ag-1", "", at(150*time.Second)))
	ok(t, e.s.AgentConnected(ctx, "ag-1", "", at(3*time.Minute)))
	ok(t, e.s.AgentDisconnected(ctx, "ag-1", at(150*time.Second), at(170*time.Second), at(200*time.Second)))
	a = get()
	if !a.DisconnectedAt.IsZero() || !a.StreamMayBeOpen(at(200*time.Second), window) {
		t.Fatalf("the replica the agent left marked it gone: disconnected at %v", a.DisconnectedAt)
	}
	equal(t, "last seen never backwards", a.LastSeenAt, at(3*time.Minute))

	// The other order: A records the end first, then B's hello (stamped
	// earlier by B's clock) opens it again.
	ok(t, e.s.AgentDisconnected(ctx, "ag-1", at(3*time.Minute), at(3*time.Minute), at(5*time.Minute)))
	ok(t, e.s.AgentConnected(ctx, "ag-1", "", at(4*time.Minute)))
	if !get().StreamMayBeOpen(at(4*time.Minute), window) {
		t.Fatal("a hello after a recorded end is not shown open")
	}
	// A replica that died without recording the end: the window closes it.
	if get().StreamMayBeOpen(at(4*time.Minute+window), window) {
		t.Fatal("a stream silent for the whole window is shown open")
	}
	wantErr(t, e.s.AgentDisconnected(ctx, "ag-9", at(time.Minute), at(time.Minute), at(time.Minute)), errs.NotFound)
}

// testAgentKeyRotation: an agent's next key is recorded only against its
// current key, once; promoting it makes it the key (the old one gone),
// once across replicas; both steps are audited.
func testAgentKeyRotation(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	cur, next := []byte("key-ag-1"), []byte("key-ag-1-next")
	// Against a key that is not the agent's: nothing.
	ok(t, e.s.SetAgentNextKey(ctx, "ag-1", []byte("other"), next, "k0", "k1", "sig", at(time.Hour)))
	a, err := e.s.GetAgent(ctx, "ag-1")
	ok(t, err)
	equal(t, "next key after a stale hello", len(a.NextPublicKey), 0)
	ok(t, e.s.SetAgentNextKey(ctx, "ag-1", cur, next, "k0", "k1", "sig", at(time.Hour)))
	ok(t, e.s.SetAgentNextKey(ctx, "ag-1", cur, next, "k0", "k1", "sig", at(time.Hour))) // again: no second event
	a, err = e.second().GetAgent(ctx, "ag-1")
	ok(t, err)
	equal(t, "next key", string(a.NextPublicKey), string(next))
	equal(t, "key before promotion", string(a.PublicKey), string(cur))
	// A promotion of a key that is not the next one does nothing.
	done, err := e.s.PromoteAgentKey(ctx, "ag-1", []byte("other"), "k0", "kx", at(2*time.Hour))
	ok(t, err)
	equal(t, "promoted another key", done, false)
	done, err = e.s.PromoteAgentKey(ctx, "ag-1", next, "k0", "k1", at(2*time.Hour))
	ok(t, err)
	equal(t, "promoted", done, true)
	done, err = e.second().PromoteAgentKey(ctx, "ag-1", next, "k0", "k1", at(2*time.Hour))
	ok(t, err)
	equal(t, "promoted twice", done, false)
	a, err = e.s.GetAgent(ctx, "ag-1")
	ok(t, err)
	if string(a.PublicKey) != string(next) || len(a.NextPublicKey) != 0 || !a.KeyRotatedAt.Equal(at(2*time.Hour)) {
		t.Fatalf("after the promotion: key %q, next %q, rotated at %v", a.PublicKey, a.NextPublicKey, a.KeyRotatedAt)
	}
	started, rotated := 0, 0
	for _, k := range e.kinds(inst) {
		switch k {
		case "agent.key_rotation_started":
			started++
		case "agent.key_rotated":
			rotated++
		}
	}
	equal(t, "agent.key_rotation_started events", started, 1)
	equal(t, "agent.key_rotated events", rotated, 1)
}
