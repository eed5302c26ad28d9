package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// An agent rollout's install is offered the release once, even when two
// replicas start it at once, and the offer is recorded for its agents in
// the same write; its agents' reports end it (confirmed: succeeded; a
// refusal: failed with the reason, audited); an install whose agent does
// not answer fails at the deadline and the offer is withdrawn; an install
// with no agent fails at once.
func testAgentRollouts(t *testing.T, e *env) {
	ctx := e.ctx()
	a, b, c := e.install("ar-a"), e.install("ar-b"), e.install("ar-c")
	e.agent(a, "agent-ar-a")
	e.agent(b, "agent-ar-b")
	waves := []store.ReleaseWave{{Name: "canary", Spec: "1", Size: 1}, {Name: "rest", Spec: "100%", Size: 2}}
	rows := []store.ReleaseInstall{{InstallID: a, Wave: 0, Position: 0}, {InstallID: b, Wave: 1, Position: 1}, {InstallID: c, Wave: 1, Position: 2}}
	const ref = "oci://reg.example/byoc/agent@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	ok(t, e.s.CreateRelease(ctx, store.Release{ID: "ar-1", AppID: "app-1", Kind: "release", State: store.ReleaseRunning, Waves: waves,
		MaxFailures: 5, AgentRelease: ref, ConfirmWithin: 10 * time.Minute, CreatedAt: T0, CreatedBy: "tok-admin"}, rows))
	rel, err := e.s.GetReleaseOnly(ctx, "ar-1")
	ok(t, err)
	equal(t, "agent release", rel.AgentRelease, ref)
	equal(t, "confirm within", rel.ConfirmWithin, 10*time.Minute)

	// Two replicas offer the canary at once: one offer.
	other := e.second()
	var wg sync.WaitGroup
	wins := make([]int, 2)
	for i, s := range []*store.Store{e.s, other} {
		wg.Go(func() {
			got, err := s.StartAgentRolloutInstalls(ctx, "ar-1", 0, []store.AgentRolloutStart{{InstallID: a, OfferID: []string{"uo-x", "uo-y"}[i]}}, at(time.Minute))
			ok(t, err)
			wins[i] = len(got)
		})
	}
	wg.Wait()
	equal(t, "canary offers", wins[0]+wins[1], 1)
	_, ins, err := e.s.GetRelease(ctx, "ar-1")
	ok(t, err)
	ag, err := e.s.GetAgent(ctx, "agent-ar-a")
	ok(t, err)
	if ag.UpdateOffer == nil || ag.UpdateOffer.ID != ins[0].OfferID || ag.UpdateOffer.Release != ref || ins[0].State != store.RIRunning {
		t.Fatalf("canary: %+v, agent offer %+v", ins[0], ag.UpdateOffer)
	}
	// Not answered yet: running; confirmed: succeeded, once.
	n, err := e.s.RecordAgentRolloutInstalls(ctx, rel, at(2*time.Minute))
	ok(t, err)
	equal(t, "nothing to record", n, 0)
	ok(t, e.s.SetAgentUpdate(ctx, "agent-ar-a", store.AgentUpdate{Mode: "allow", LastKind: "confirmed", LastOfferID: ins[0].OfferID, LastAt: at(3 * time.Minute)}, true, at(3*time.Minute)))
	n, err = e.s.RecordAgentRolloutInstalls(ctx, rel, at(3*time.Minute))
	ok(t, err)
	equal(t, "confirmed recorded", n, 1)
	n, err = e.s.RecordAgentRolloutInstalls(ctx, rel, at(3*time.Minute))
	ok(t, err)
	equal(t, "recorded again", n, 0)

	// The rest: b refuses it, c has no agent.
	moved, err := e.s.StartNextWave(ctx, "ar-1", 0, "rest", 2, at(4*time.Minute))
	ok(t, err)
	equal(t, "next wave", moved, true)
	started, err := e.s.StartAgentRolloutInstalls(ctx, "ar-1", 1, []store.AgentRolloutStart{{InstallID: b, OfferID: "uo-b"}, {InstallID: c, OfferID: "uo-c"}}, at(4*time.Minute))
	ok(t, err)
	equal(t, "rest offered", len(started), 2)
	ok(t, e.s.SetAgentUpdate(ctx, "agent-ar-b", store.AgentUpdate{Mode: "manual", LastKind: "refused", LastCause: "policy", LastOfferID: "uo-b",
		LastReason: "the update policy is manual", LastAt: at(5 * time.Minute)}, true, at(5*time.Minute)))
	_, err = e.s.RecordAgentRolloutInstalls(ctx, rel, at(5*time.Minute))
	ok(t, err)
	_, ins, err = e.s.GetRelease(ctx, "ar-1")
	ok(t, err)
	equal(t, "refused", ins[1].State, store.RIFailed)
	equal(t, "refused why", ins[1].Error, "agent agent-ar-b refused it: the update policy is manual")
	equal(t, "no agent", ins[2].State, store.RIFailed)

	// A silent agent: failed at the deadline, its offer withdrawn.
	ok(t, e.s.CreateRelease(ctx, store.Release{ID: "ar-2", AppID: "app-1", Kind: "release", State: store.ReleaseRunning,
		Waves: []store.ReleaseWave{{Name: "all", Spec: "100%", Size: 1}}, MaxFailures: 5, AgentRelease: ref, ConfirmWithin: time.Minute,
		CreatedAt: at(6 * time.Minute), CreatedBy: "tok-admin"}, []store.ReleaseInstall{{InstallID: a}}))
	rel2, err := e.s.GetReleaseOnly(ctx, "ar-2")
	ok(t, err)
	_, err = e.s.StartAgentRolloutInstalls(ctx, "ar-2", 0, []store.AgentRolloutStart{{InstallID: a, OfferID: "uo-late"}}, at(6*time.Minute))
	ok(t, err)
	n, err = e.s.RecordAgentRolloutInstalls(ctx, rel2, at(7*time.Minute))
	ok(t, err)
	equal(t, "timed out", n, 1)
	ag, err = e.s.GetAgent(ctx, "agent-ar-a")
	ok(t, err)
	if !ag.UpdateOffer.Withdrawn() || ag.UpdateOffer.ID != "uo-late" || ag.UpdateOffer.WithdrawnBy != "release ar-2" {
		t.Fatalf("offer not withdrawn: %+v", ag.UpdateOffer)
	}
	evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: store.VendorChain, OneChain: true})
	ok(t, err)
	failed := 0
	for _, ev := range evs {
		if ev.Kind == "release.install_failed" {
			failed++
		}
	}
	equal(t, "install failures audited", failed, 3)

	// The new version failed and its rollback was refused (the old
	// binary changed on disk): the install failed, saying so.
	ok(t, e.s.CreateRelease(ctx, store.Release{ID: "ar-3", AppID: "app-1", Kind: "release", State: store.ReleaseRunning,
		Waves: []store.ReleaseWave{{Name: "all", Spec: "100%", Size: 1}}, MaxFailures: 5, AgentRelease: ref, ConfirmWithin: time.Hour,
		CreatedAt: at(8 * time.Minute), CreatedBy: "tok-admin"}, []store.ReleaseInstall{{InstallID: a}}))
	rel3, err := e.s.GetReleaseOnly(ctx, "ar-3")
	ok(t, err)
	_, err = e.s.StartAgentRolloutInstalls(ctx, "ar-3", 0, []store.AgentRolloutStart{{InstallID: a, OfferID: "uo-3"}}, at(8*time.Minute))
	ok(t, err)
	ok(t, e.s.SetAgentUpdate(ctx, "agent-ar-a", store.AgentUpdate{Mode: "allow", LastKind: "rollback_refused", LastCause: "prev_check", LastOfferID: "uo-3",
		LastReason: "agentd.prev is not the binary the update replaced", LastAt: at(9 * time.Minute)}, true, at(9*time.Minute)))
	n, err = e.s.RecordAgentRolloutInstalls(ctx, rel3, at(9*time.Minute))
	ok(t, err)
	equal(t, "rollback refused recorded", n, 1)
	_, ins, err = e.s.GetRelease(ctx, "ar-3")
	ok(t, err)
	equal(t, "rollback refused", ins[0].State, store.RIFailed)
	equal(t, "rollback refused why", ins[0].Error, "agent agent-ar-a could not roll it back: agentd.prev is not the binary the update replaced")
}

// Cancelling an agent rollout withdraws, in the same write, the offers of
// its running installs that no agent took (unanswered or deferred to the
// customer's window): those installs end cancelled, each agent's offer is
// marked withdrawn and audited on the install's chain. An install whose
// agent applied the offer keeps running (not rolled back). Cancelling
// again, or from a second replica at once, withdraws nothing more.
func testAgentRolloutCancel(t *testing.T, e *env) {
	ctx := e.ctx()
	d, ap, f, g := e.install("arc-deferred"), e.install("arc-applied"), e.install("arc-silent"), e.install("arc-later")
	e.agent(d, "agent-arc-d")
	e.agent(ap, "agent-arc-a")
	e.agent(f, "agent-arc-f")
	e.agent(g, "agent-arc-g")
	const ref = "oci://reg.example/byoc/agent@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	waves := []store.ReleaseWave{{Name: "first", Spec: "3", Size: 3}, {Name: "rest", Spec: "100%", Size: 1}}
	ok(t, e.s.CreateRelease(ctx, store.Release{ID: "arc-1", AppID: "app-1", Kind: "release", State: store.ReleaseRunning, Waves: waves,
		MaxFailures: 5, AgentRelease: ref, ConfirmWithin: time.Hour, CreatedAt: T0, CreatedBy: "tok-admin"},
		[]store.ReleaseInstall{{InstallID: d, Position: 0}, {InstallID: ap, Position: 1}, {InstallID: f, Position: 2}, {InstallID: g, Wave: 1, Position: 3}}))
	_, err := e.s.StartAgentRolloutInstalls(ctx, "arc-1", 0, []store.AgentRolloutStart{{InstallID: d, OfferID: "uo-d"}, {InstallID: ap, OfferID: "uo-a"},
		{InstallID: f, OfferID: "uo-f"}}, at(time.Minute))
	ok(t, err)
	ok(t, e.s.SetAgentUpdate(ctx, "agent-arc-d", store.AgentUpdate{Mode: "allow", LastKind: "deferred", LastCause: "window", LastOfferID: "uo-d",
		LastReason: "the update window is closed", LastAt: at(2 * time.Minute)}, true, at(2*time.Minute)))
	ok(t, e.s.SetAgentUpdate(ctx, "agent-arc-a", store.AgentUpdate{Mode: "allow", LastKind: "applied", LastOfferID: "uo-a",
		LastAt: at(2 * time.Minute)}, true, at(2*time.Minute)))
	rel, err := e.s.GetReleaseOnly(ctx, "arc-1")
	ok(t, err)
	_, err = e.s.RecordAgentRolloutInstalls(ctx, rel, at(2*time.Minute))
	ok(t, err)

	// Two replicas cancel at once.
	other := e.second()
	var wg sync.WaitGroup
	for _, s := range []*store.Store{e.s, other} {
		wg.Go(func() {
			_, err := s.ChangeRelease(ctx, "arc-1", store.ReleaseCancel, "alice", "bad build", at(3*time.Minute))
			ok(t, err)
		})
	}
	wg.Wait()
	_, ins, err := e.s.GetRelease(ctx, "arc-1")
	ok(t, err)
	byInstall := map[string]store.ReleaseInstall{}
	for _, in := range ins {
		byInstall[in.InstallID] = in
	}
	for _, in := range []string{d, f} {
		equal(t, in+" state", byInstall[in].State, store.RICancelled)
		equal(t, in+" why", byInstall[in].Error, "rollout cancelled by alice; offer withdrawn: bad build")
	}
	equal(t, "applied install", byInstall[ap].State, store.RIRunning)
	if !strings.Contains(byInstall[ap].Error, "not rolled back") {
		t.Errorf("applied install's why: %q", byInstall[ap].Error)
	}
	equal(t, "not started", byInstall[g].State, store.RICancelled)
	for id, want := range map[string]string{"agent-arc-d": "uo-d", "agent-arc-f": "uo-f"} {
		ag, err := e.s.GetAgent(ctx, id)
		ok(t, err)
		if o := ag.UpdateOffer; !o.Withdrawn() || o.ID != want || o.WithdrawnBy != "alice" || o.WithdrawReason != "release arc-1 cancelled: bad build" || !o.WithdrawnAt.Equal(at(3*time.Minute)) {
			t.Errorf("%s: offer %+v, want %s withdrawn by alice", id, o, want)
		}
	}
	ag, err := e.s.GetAgent(ctx, "agent-arc-a")
	ok(t, err)
	if ag.UpdateOffer.Withdrawn() {
		t.Errorf("an applied offer was withdrawn: %+v", ag.UpdateOffer)
	}
	ag, err = e.s.GetAgent(ctx, "agent-arc-g")
	ok(t, err)
	if ag.UpdateOffer != nil {
		t.Errorf("an install never offered has an offer: %+v", ag.UpdateOffer)
	}
	withdrawn := func(chain string) int {
		evs, err := e.s.ListAuditEvents(ctx, store.AuditFilter{Chain: chain, OneChain: true})
		ok(t, err)
		n := 0
		for _, ev := range evs {
			if ev.Kind == store.KindAgentUpdateOfferWithdrawn {
				n++
				equal(t, "withdrawal actor", ev.Actor, "alice")
				equal(t, "withdrawal offer", ev.Data["offer"], map[string]string{d: "uo-d", f: "uo-f"}[chain])
			}
		}
		return n
	}
	equal(t, "withdrawals audited (deferred)", withdrawn(d), 1)
	equal(t, "withdrawals audited (silent)", withdrawn(f), 1)
	equal(t, "withdrawals audited (applied)", withdrawn(ap), 0)

	// Again: nothing more.
	_, err = e.s.ChangeRelease(ctx, "arc-1", store.ReleaseCancel, "bob", "", at(4*time.Minute))
	ok(t, err)
	equal(t, "withdrawals audited again", withdrawn(d), 1)
	ag, err = e.s.GetAgent(ctx, "agent-arc-d")
	ok(t, err)
	equal(t, "withdrawn by", ag.UpdateOffer.WithdrawnBy, "alice")

	// byoc agent update --withdraw: not a rollout's offer (cancel it);
	// an operator's offer is withdrawn once.
	if _, _, err := e.s.WithdrawAgentUpdate(ctx, ap, "", "bob", "", at(4*time.Minute)); !errs.Is(err, errs.Conflict) || !strings.Contains(err.Error(), "cancel the rollout") {
		t.Errorf("withdrawing a rollout's offer: %v", err)
	}
	_, err = e.s.OfferAgentUpdate(ctx, g, store.UpdateOffer{ID: "uo-op", Release: ref, OfferedAt: at(4 * time.Minute)}, "carol")
	ok(t, err)
	offerID, agents, err := e.s.WithdrawAgentUpdate(ctx, g, "", "dave", "wrong release", at(4*time.Minute))
	ok(t, err)
	if offerID != "uo-op" || len(agents) != 1 || agents[0] != "agent-arc-g" {
		t.Errorf("withdrawn: %s %v", offerID, agents)
	}
	if _, _, err := e.s.WithdrawAgentUpdate(ctx, g, "", "dave", "", at(4*time.Minute)); !errs.Is(err, errs.NotFound) {
		t.Errorf("withdrawn twice: %v", err)
	}
	ag, err = e.s.GetAgent(ctx, "agent-arc-g")
	ok(t, err)
	if o := ag.UpdateOffer; !o.Withdrawn() || o.WithdrawnBy != "dave" || o.WithdrawReason != "wrong release" {
		t.Errorf("withdrawn offer: %+v", o)
	}
	// Two replicas withdraw one offer at once: one withdraws it, once;
	// the other is refused (not told it withdrew nothing), whichever
	// moment it read the offer.
	for round := range 5 {
		id := fmt.Sprintf("uo-race-%d", round)
		_, err = e.s.OfferAgentUpdate(ctx, g, store.UpdateOffer{ID: id, Release: ref, OfferedAt: at(4 * time.Minute)}, "carol")
		ok(t, err)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won, refused int
		for i, s := range []*store.Store{e.s, other} {
			wg.Go(func() {
				_, agents, err := s.WithdrawAgentUpdate(ctx, g, id, fmt.Sprintf("op-%d", i), "", at(4*time.Minute))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && len(agents) == 1:
					won++
				case errs.Is(err, errs.Conflict) || errs.Is(err, errs.NotFound):
					refused++
				default:
					t.Errorf("round %d: withdrawn %v, %v", round, agents, err)
				}
			})
		}
		wg.Wait()
		if won != 1 || refused != 1 {
			t.Errorf("round %d: %d withdrew it, %d refused", round, won, refused)
		}
	}

	// The applied install ends as its agent reports.
	ok(t, e.s.SetAgentUpdate(ctx, "agent-arc-a", store.AgentUpdate{Mode: "allow", LastKind: "confirmed", LastOfferID: "uo-a",
		LastAt: at(5 * time.Minute)}, true, at(5*time.Minute)))
	rel, err = e.s.GetReleaseOnly(ctx, "arc-1")
	ok(t, err)
	n, err := e.s.RecordAgentRolloutInstalls(ctx, rel, at(5*time.Minute))
	ok(t, err)
	equal(t, "applied install ended", n, 1)
}
