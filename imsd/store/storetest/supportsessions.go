package storetest

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testRecordingKeptOnce: the vendor's copy of a support session's
// recording, sent by the agent the session was started on, is kept and
// audited once however many writers race to keep it, on either replica;
// the same copy again is not an error (the agent is told it is kept); a
// copy with another SHA-256, one whose SHA-256 differs from the
// session's end record, and one from an agent the session was not
// started on (or of a session never started) are refused, naming the
// session, with nothing written.
func testRecordingKeptOnce(t *testing.T, e *env) {
	ctx := e.ctx()
	acme := e.install("acme")
	start := func(id string) {
		t.Helper()
		ok(t, e.s.StartSupportSession(ctx, store.SupportSession{ID: id, InstallID: acme, AgentID: "ag-1", StartedAt: at(0)},
			store.AuditEvent{Chain: acme, At: at(0), Kind: "support.session.started", Actor: "token:admin", Subject: id}))
	}
	rec := func(id, agent, sum, data string) store.SessionRecording {
		return store.SessionRecording{SessionID: id, InstallID: acme, AgentID: agent, SHA256: sum, Data: []byte(data), At: at(time.Minute)}
	}
	start("ss_1")
	kept := e.racing(func(s *store.Store, _ bool) (bool, error) {
		return s.KeepSessionRecording(ctx, rec("ss_1", "ag-1", "sum-1", "one"), false)
	})
	equal(t, "copies of ss_1 kept", kept, 1)
	k, err := e.second().KeepSessionRecording(ctx, rec("ss_1", "ag-1", "sum-1", "one"), false)
	ok(t, err)
	equal(t, "ss_1 kept again", k, false)
	_, err = e.s.KeepSessionRecording(ctx, rec("ss_1", "ag-1", "sum-other", "other"), true)
	wantErr(t, err, errs.Conflict, "ss_1", "sum-1", "sum-other")
	r, err := e.second().GetSessionRecording(ctx, "ss_1")
	ok(t, err)
	equal(t, "ss_1's data", string(r.Data), "one")

	// Another agent, a session never started (unless opened through the
	// sending stream), another install's session.
	start("ss_2")
	_, err = e.s.KeepSessionRecording(ctx, rec("ss_2", "ag-2", "sum-2", "two"), true)
	wantErr(t, err, errs.NotFound, "ss_2", "ag-2")
	_, err = e.s.KeepSessionRecording(ctx, rec("ss_never", "ag-1", "sum-n", "n"), false)
	wantErr(t, err, errs.NotFound, "ss_never")
	k, err = e.s.KeepSessionRecording(ctx, rec("ss_opened", "ag-1", "sum-o", "o"), true)
	ok(t, err)
	equal(t, "ss_opened kept", k, true)

	// Checked against the end record's hash, when it has one.
	start("ss_3")
	_, err = e.s.EndSupportSession(ctx, "ss_3", "ag-1", store.AuditEvent{Chain: acme, At: at(time.Minute), Kind: store.KindSessionEnded,
		Actor: "agent:ag-1", Subject: "ss_3", Data: map[string]string{"recording_sha256": "sum-3"}})
	ok(t, err)
	_, err = e.s.KeepSessionRecording(ctx, rec("ss_3", "ag-1", "sum-forged", "forged"), false)
	wantErr(t, err, errs.Invalid, "ss_3", "sum-forged", "sum-3")
	k, err = e.s.KeepSessionRecording(ctx, rec("ss_3", "ag-1", "sum-3", "three"), false)
	ok(t, err)
	equal(t, "ss_3 kept", k, true)

	n := 0
	for _, kind := range e.kinds(acme) {
		if kind == store.KindRecordingKept {
			n++
		}
	}
	equal(t, "acme's recording_kept events", n, 3)
	list, err := e.s.ListSessionRecordings(ctx, acme)
	ok(t, err)
	equal(t, "acme's recordings", len(list), 3)
	if p := e.verify(acme); p != nil {
		t.Fatalf("acme's chain: %v", p)
	}
}

// testLostSupportSessions: an open support session whose agent has not
// been heard since the cutoff is listed as lost and ended once, however
// many replicas race to end it; one whose agent was heard since, one
// ended already and one started after the cutoff are not; the agent's
// own report of the end coming after writes nothing, and a lost end
// does not overwrite a reported one.
func testLostSupportSessions(t *testing.T, e *env) {
	ctx := e.ctx()
	acme := e.install("acme")
	e.agent(acme, "ag-gone")
	e.agent(acme, "ag-live")
	ok(t, e.s.TouchAgent(ctx, "ag-gone", at(time.Minute)))
	ok(t, e.s.TouchAgent(ctx, "ag-live", at(95*time.Minute)))
	start := func(id, agent string, d time.Duration) {
		t.Helper()
		ok(t, e.s.StartSupportSession(ctx, store.SupportSession{ID: id, InstallID: acme, AgentID: agent, StartedAt: at(d)},
			store.AuditEvent{Chain: acme, At: at(d), Kind: "support.session.started", Actor: "token:admin", Subject: id}))
	}
	ev := func(id, actor string) store.AuditEvent {
		return store.AuditEvent{Chain: acme, At: at(2 * time.Hour), Kind: store.KindSessionEnded, Actor: actor, Subject: id}
	}
	start("ss_lost", "ag-gone", 0)
	start("ss_reported", "ag-gone", 0)
	start("ss_live", "ag-live", 0)
	start("ss_late", "ag-gone", 100*time.Minute)
	wrote, err := e.s.EndSupportSession(ctx, "ss_reported", "ag-gone", ev("ss_reported", "agent:ag-gone"))
	ok(t, err)
	equal(t, "ss_reported's end written", wrote, true)

	cutoff := at(90 * time.Minute)
	for _, s := range []*store.Store{e.s, e.second()} {
		lost, err := s.LostSupportSessions(ctx, cutoff, 10)
		ok(t, err)
		if len(lost) != 1 || lost[0].ID != "ss_lost" || lost[0].AgentID != "ag-gone" || !lost[0].LastSeen.Equal(at(time.Minute)) {
			t.Fatalf("lost sessions: %+v, want ss_lost of ag-gone, last heard at %v", lost, at(time.Minute))
		}
	}
	// Not lost after all: the agent was heard since the cutoff.
	wrote, err = e.s.EndLostSupportSession(ctx, "ss_live", cutoff, ev("ss_live", "imsd"))
	ok(t, err)
	equal(t, "ss_live ended as lost", wrote, false)
	wrote, err = e.s.EndLostSupportSession(ctx, "ss_reported", cutoff, ev("ss_reported", "imsd"))
	ok(t, err)
	equal(t, "ss_reported ended again as lost", wrote, false)

	n := e.racing(func(s *store.Store, _ bool) (bool, error) {
		return s.EndLostSupportSession(ctx, "ss_lost", cutoff, ev("ss_lost", "imsd"))
	})
	equal(t, "ends written of ss_lost", n, 1)
	wrote, err = e.second().EndSupportSession(ctx, "ss_lost", "ag-gone", ev("ss_lost", "agent:ag-gone"))
	ok(t, err)
	equal(t, "the agent's late report of ss_lost written", wrote, false)
	lost, err := e.s.LostSupportSessions(ctx, cutoff, 10)
	ok(t, err)
	equal(t, "lost sessions after the sweep", len(lost), 0)

	ends := map[string]int{}
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: acme, OneChain: true})
	ok(t, err)
	for _, ev := range evs {
		if ev.Kind == store.KindSessionEnded {
			ends[ev.Subject+" "+ev.Actor]++
		}
	}
	if len(ends) != 2 || ends["ss_lost imsd"] != 1 || ends["ss_reported agent:ag-gone"] != 1 {
		t.Fatalf("support.session.ended records: %v, want one of ss_lost by imsd and one of ss_reported by its agent", ends)
	}
	if p := e.verify(acme); p != nil {
		t.Fatalf("acme's chain: %v", p)
	}
}
