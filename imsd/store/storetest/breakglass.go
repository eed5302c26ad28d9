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
