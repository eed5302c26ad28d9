package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// testBreakGlass: a request is pending until decided; it reads as
// expired past its request expiry (and can no longer be decided); only
// the install's own decision applies; approved grants read expired past
// their end and can be revoked once; a second replica reads the same.
func testBreakGlass(t *testing.T, e *env) {
	ctx := e.ctx()
	acme, beta := e.install("acme"), e.install("beta")
	req := func(id, inst string) store.BreakGlassGrant {
		return store.BreakGlassGrant{ID: id, InstallID: inst, Role: "debugger", Reason: "INC-1", RequestedBy: "ops",
			RequestedAt: at(0), Duration: time.Hour, RequestExpiresAt: at(30 * time.Minute)}
	}
	ok(t, e.s.CreateBreakGlassRequest(ctx, req("bg_1", acme)))
	ok(t, e.s.CreateBreakGlassRequest(ctx, req("bg_2", acme)))
	ok(t, e.s.CreateBreakGlassRequest(ctx, req("bg_3", beta)))
	wantErr(t, e.s.CreateBreakGlassRequest(ctx, req("bg_4", "ins-nowhere")), errs.NotFound, "ins-nowhere")
	bad := req("bg_5", acme)
	bad.Duration = 0
	wantErr(t, e.s.CreateBreakGlassRequest(ctx, bad), errs.Invalid, "duration")

	approve := store.BreakGlassDecision{GrantID: "bg_1", InstallID: acme, AgentID: "ag-1", State: store.GrantApproved,
		By: "alice", At: at(time.Minute), ExpiresAt: at(31 * time.Minute), Statement: "{}", Signature: []byte{1, 2}}
	// Another install's decision is refused and changes nothing.
	wrong := approve
	wrong.InstallID = beta
	_, err := e.s.DecideBreakGlass(ctx, wrong, at(time.Minute))
	wantErr(t, err, errs.NotFound, "bg_1")
	g, err := e.s.DecideBreakGlass(ctx, approve, at(time.Minute))
	ok(t, err)
	equal(t, "state", g.State, store.GrantApproved)
	equal(t, "decided by", g.DecidedBy, "alice")
	_, err = e.s.DecideBreakGlass(ctx, approve, at(2*time.Minute))
	wantErr(t, err, errs.Conflict, "approved")

	// bg_2 was never decided: past its request expiry it is expired and
	// cannot be approved.
	late := approve
	late.GrantID = "bg_2"
	_, err = e.s.DecideBreakGlass(ctx, late, at(30*time.Minute))
	wantErr(t, err, errs.Conflict, "expired")

	revoke := store.BreakGlassDecision{GrantID: "bg_1", InstallID: acme, AgentID: "ag-1", State: store.GrantRevoked,
		By: "bob", At: at(10 * time.Minute), Reason: "done"}
	g, err = e.s.DecideBreakGlass(ctx, revoke, at(10*time.Minute))
	ok(t, err)
	equal(t, "revoked by", g.RevokedBy, "bob")
	_, err = e.s.DecideBreakGlass(ctx, revoke, at(11*time.Minute))
	wantErr(t, err, errs.Conflict, "revoked")

	for _, s := range []*store.Store{e.s, e.second()} {
		gs, err := s.ListBreakGlassGrants(ctx, acme)
		ok(t, err)
		equal(t, "acme's grants", len(gs), 2)
		all, err := s.ListBreakGlassGrants(ctx, "")
		ok(t, err)
		equal(t, "every grant", len(all), 3)
		g, err := s.GetBreakGlassGrant(ctx, "bg_1")
		ok(t, err)
		equal(t, "bg_1", g.StateAt(at(12*time.Minute)), store.GrantRevoked)
		equal(t, "bg_1 reason", g.DecisionReason, "done")
		equal(t, "bg_1 signature", string(g.Signature), "\x01\x02")
		g, err = s.GetBreakGlassGrant(ctx, "bg_3")
		ok(t, err)
		equal(t, "bg_3 before its expiry", g.StateAt(at(29*time.Minute)), store.GrantPending)
		equal(t, "bg_3 at its expiry", g.StateAt(at(30*time.Minute)), store.GrantExpired)
	}
	// Every step is in the install's audit chain, once: the refused
	// decisions left nothing.
	var steps []string
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: acme, OneChain: true})
	ok(t, err)
	for _, ev := range evs {
		if strings.HasPrefix(ev.Kind, "breakglass.") {
			steps = append(steps, ev.Kind+" "+ev.Subject+" "+ev.Actor)
		}
		if ev.Kind == "breakglass.approved" {
			equal(t, "approval's signature", ev.Data["signature"], "AQI=")
			equal(t, "approved by", ev.Data["by"], "alice")
		}
	}
	equal(t, "acme's break-glass records", strings.Join(steps, ", "),
		"breakglass.requested breakglass:bg_1 ops, breakglass.requested breakglass:bg_2 ops, breakglass.approved breakglass:bg_1 agent:ag-1, breakglass.revoked breakglass:bg_1 agent:ag-1")
	ok(t, nilProblem(e.verify(acme)))
	ok(t, nilProblem(e.verify(beta)))

	a := store.BreakGlassGrant{State: store.GrantApproved, ExpiresAt: at(time.Hour)}
	equal(t, "approved before its end", a.StateAt(at(59*time.Minute)), store.GrantApproved)
	equal(t, "approved at its end", a.StateAt(at(time.Hour)), store.GrantExpired)
}

// testSessionRecordings: recordings kept of support sessions are listed
// per install, oldest first, and read back byte for byte with their
// hash, from a second replica too; each keep is audited in its
// install's chain (which verifies); a second keep of one session is
// refused and the first copy stays; an unknown session is not found,
// named.
func testSessionRecordings(t *testing.T, e *env) {
	ctx := e.ctx()
	acme, beta := e.install("acme"), e.install("beta")
	rec := func(id, inst string, d time.Duration, data string) store.SessionRecording {
		return store.SessionRecording{SessionID: id, InstallID: inst, AgentID: "ag-1", SHA256: "sum-" + id, Data: []byte(data), At: at(d)}
	}
	ok(t, e.s.SaveSessionRecording(ctx, rec("ses_2", acme, time.Minute, "second\x00\xff")))
	ok(t, e.s.SaveSessionRecording(ctx, rec("ses_1", acme, 0, "first")))
	ok(t, e.s.SaveSessionRecording(ctx, rec("ses_3", beta, 0, "other")))
	if err := e.s.SaveSessionRecording(ctx, rec("ses_1", acme, 2*time.Minute, "replaced")); err == nil {
		t.Fatal("a second recording of ses_1 was kept")
	}
	for _, s := range []*store.Store{e.s, e.second()} {
		list, err := s.ListSessionRecordings(ctx, acme)
		ok(t, err)
		if len(list) != 2 || list[0].SessionID != "ses_1" || list[1].SessionID != "ses_2" {
			t.Fatalf("acme's recordings: %+v, want ses_1 then ses_2", list)
		}
		equal(t, "ses_1's data", string(list[0].Data), "first")
		equal(t, "ses_2's data", string(list[1].Data), "second\x00\xff")
		equal(t, "ses_2's hash", list[1].SHA256, "sum-ses_2")
		equal(t, "ses_2's install", list[1].InstallID, acme)
		equal(t, "ses_2's agent", list[1].AgentID, "ag-1")
		if !list[1].At.Equal(at(time.Minute)) {
			t.Fatalf("ses_2 kept at %v, want %v", list[1].At, at(time.Minute))
		}
		other, err := s.ListSessionRecordings(ctx, beta)
		ok(t, err)
		equal(t, "beta's recordings", len(other), 1)
		none, err := s.ListSessionRecordings(ctx, "ins-nowhere")
		ok(t, err)
		equal(t, "an unknown install's recordings", len(none), 0)
		r, err := s.GetSessionRecording(ctx, "ses_1")
		ok(t, err)
		equal(t, "ses_1 read back", string(r.Data), "first")
		_, err = s.GetSessionRecording(ctx, "ses_nowhere")
		wantErr(t, err, errs.NotFound, "ses_nowhere")
	}
	kept := 0
	for _, k := range e.kinds(acme) {
		if k == "support.session.recording_kept" {
			kept++
		}
	}
	equal(t, "acme's recording_kept events", kept, 2)
	if p := e.verify(acme); p != nil {
		t.Fatalf("acme's chain: %v", p)
	}
}

// testSupportSessionEndsOnce: a support session's end is audited once,
// by whichever writer comes first, on either replica and from many at
// once: later ends, an end by another agent than the session's, on
// another install, or of a session never started write nothing.
func testSupportSessionEndsOnce(t *testing.T, e *env) {
	ctx := e.ctx()
	acme, beta := e.install("acme"), e.install("beta")
	ev := func(chain, kind, actor string) store.AuditEvent {
		return store.AuditEvent{Chain: chain, At: at(time.Minute), Kind: kind, Actor: actor, Subject: "ss_1"}
	}
	ok(t, e.s.StartSupportSession(ctx, store.SupportSession{ID: "ss_1", InstallID: acme, AgentID: "ag-1", StartedAt: at(0)},
		ev(acme, "support.session.started", "token:admin")))
	for _, bad := range []struct {
		name, agent, chain string
	}{{"another agent", "ag-2", acme}, {"another install", "", beta}} {
		wrote, err := e.s.EndSupportSession(ctx, "ss_1", bad.agent, ev(bad.chain, "support.session.ended", "agent:"+bad.agent))
		ok(t, err)
		if wrote {
			t.Fatalf("the end of ss_1 written by %s", bad.name)
		}
	}
	wrote, err := e.s.EndSupportSession(ctx, "ss_never", "", ev(acme, "support.session.ended", "token:admin"))
	ok(t, err)
	if wrote {
		t.Fatal("the end of a session never started written")
	}
	n := e.racing(func(s *store.Store, second bool) (bool, error) {
		agent := ""
		if second {
			agent = "ag-1"
		}
		return s.EndSupportSession(ctx, "ss_1", agent, ev(acme, "support.session.ended", "x"))
	})
	equal(t, "ends written of ss_1", n, 1)
	for _, c := range []struct {
		chain string
		want  int
	}{{acme, 1}, {beta, 0}} {
		ended := 0
		for _, k := range e.kinds(c.chain) {
			if k == "support.session.ended" {
				ended++
			}
		}
		equal(t, c.chain+"'s support.session.ended events", ended, c.want)
	}
	if p := e.verify(acme); p != nil {
		t.Fatalf("acme's chain: %v", p)
	}
}
