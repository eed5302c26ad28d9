package release

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

const (
	goodRelease = "oci://reg.example/byoc/agent@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	badRelease  = "oci://reg.example/byoc/agent@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// report records what install name's agent reports of its latest update
// decision, as agentapi does from a heartbeat.
func (r *rig) report(name, kind, offer, reason string) {
	r.t.Helper()
	must(r.t, r.st.SetAgentUpdate(r.t.Context(), "agent_"+name, store.AgentUpdate{Mode: "allow", Allow: ">=1.4 <2", LastKind: kind,
		LastOfferID: offer, LastReason: reason, LastAt: r.now()}, true, r.now()))
}

// offerOf is the offer standing for install name's agent ("" for none,
// or one withdrawn).
func (r *rig) offerOf(name string) string {
	r.t.Helper()
	a, err := r.st.GetAgent(r.t.Context(), "agent_"+name)
	must(r.t, err)
	if a.UpdateOffer == nil || a.UpdateOffer.Withdrawn() {
		return "" // none standing
	}
	return a.UpdateOffer.ID
}

func (r *rig) advance(id string) {
	r.t.Helper()
	must(r.t, r.e.Advance(r.t.Context(), id))
}

// An agent rollout offers the agent release to its canary wave first
// (two engines advancing at once offer each install once), the rest once
// every canary confirmed; a second rollout whose canary refuses the
// release halts and never offers it to the others; an install whose agent
// never answers fails at the deadline and its offer is withdrawn.
func TestAgentRollout(t *testing.T) {
	r := newRig(t, 4)
	ctx := t.Context()
	other := NewEngine(r.st, r.hub, r.wf, r.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rel, err := r.e.CreateAgentRollout(ctx, AgentRolloutRequest{Release: goodRelease, Canary: 1, By: "ops"})
	must(t, err)
	if rel.AppID != "app_1" || len(rel.Waves) != 2 || rel.Waves[0].Name != "canary" || rel.Waves[0].Size != 1 || rel.ConfirmWithin != DefaultConfirmWithin {
		t.Fatalf("rollout: %+v", rel)
	}
	var wg sync.WaitGroup
	for _, e := range []*Engine{r.e, other} {
		wg.Go(func() { must(t, e.Advance(ctx, rel.ID)) })
	}
	wg.Wait()
	_, ins := r.get(rel.ID)
	if states(ins) != "in00:0:running in01:1:pending in02:1:pending in03:1:pending" || ins[0].OfferID == "" || r.offerOf("in00") != ins[0].OfferID || r.offerOf("in01") != "" {
		t.Fatalf("after the first pass: %s (offer %q)", states(ins), ins[0].OfferID)
	}
	// The agent applied it: still running; confirmed: the rest is offered.
	r.report("in00", "applied", ins[0].OfferID, "")
	r.advance(rel.ID)
	if _, ins = r.get(rel.ID); ins[0].State != store.RIRunning {
		t.Fatalf("applied, not confirmed: %s", states(ins))
	}
	r.report("in00", "confirmed", ins[0].OfferID, "")
	r.advance(rel.ID)
	_, ins = r.get(rel.ID)
	if states(ins) != "in00:0:succeeded in01:1:running in02:1:running in03:1:running" {
		t.Fatalf("after the canary confirmed: %s", states(ins))
	}
	for _, in := range ins[1:] {
		r.report(in.InstallName, "confirmed", in.OfferID, "")
	}
	r.advance(rel.ID)
	got, ins := r.get(rel.ID)
	if got.State != store.ReleaseSucceeded {
		t.Fatalf("rollout %s: %s", got.State, states(ins))
	}
	if _, err := r.e.Rollback(ctx, rel.ID, "", "ops"); err == nil || !strings.Contains(err.Error(), "roll the previous agent release out") {
		t.Fatalf("rollback of an agent rollout: %v", err)
	}
	evs, err := r.st.ListAuditEvents(ctx, store.AuditFilter{})
	must(t, err)
	offered := map[string]int{}
	for _, ev := range evs {
		if ev.Kind == "agent.update_offered" {
			offered[ev.Subject]++
		}
	}
	for _, name := range r.names {
		if offered["agent:agent_"+name] != 1 {
			t.Errorf("agent_%s was offered the release %d times, want once", name, offered["agent:agent_"+name])
		}
	}

	// A bad release: the canary's agent fails its self-check.
	bad, err := r.e.CreateAgentRollout(ctx, AgentRolloutRequest{Release: badRelease, Canary: 1, MaxFailures: "50%", By: "ops"})
	must(t, err)
	r.advance(bad.ID)
	_, ins = r.get(bad.ID)
	r.report("in00", "failed", ins[0].OfferID, "self_check: the release's agentd does not run here")
	r.advance(bad.ID)
	got, ins = r.get(bad.ID)
	if got.State != store.ReleaseHalted || !strings.Contains(got.Error, "canary") || ins[0].State != store.RIFailed ||
		!strings.Contains(ins[0].Error, "self_check") || states(ins[1:]) != "in01:1:pending in02:1:pending in03:1:pending" {
		t.Fatalf("bad rollout %s (%s): %s; %s", got.State, got.Error, states(ins), ins[0].Error)
	}
	for _, name := range r.names[1:] {
		if o := r.offerOf(name); o == "" || strings.Contains(o, bad.ID) || o != findOffer(t, r, rel.ID, name) {
			t.Errorf("%s was offered the bad release (offer %q)", name, o)
		}
	}
	_, err = r.st.ChangeRelease(ctx, bad.ID, store.ReleaseCancel, "ops", "bad build", r.now())
	must(t, err)
	r.advance(bad.ID)
	if got, _ = r.get(bad.ID); got.State != store.ReleaseCancelled {
		t.Fatalf("cancelled rollout: %s", got.State)
	}

	// An agent that never answers: failed at the deadline, the offer
	// withdrawn; an agent that deferred it to its customer's window is
	// not.
	late, err := r.e.CreateAgentRollout(ctx, AgentRolloutRequest{Release: goodRelease, Selector: "", Waves: "100%", MaxFailures: "100%",
		ConfirmWithin: time.Minute, By: "ops"})
	must(t, err)
	r.advance(late.ID)
	_, ins = r.get(late.ID)
	r.report("in01", "deferred", ins[1].OfferID, "outside the update window Sun 03:00-05:00 UTC; applies at its next opening")
	r.clock.Add(int64(2 * time.Minute))
	r.advance(late.ID)
	_, ins = r.get(late.ID)
	if ins[0].State != store.RIFailed || !strings.Contains(ins[0].Error, "not confirmed within 1m0s") || r.offerOf("in00") != "" {
		t.Fatalf("silent agent: %s (%s), offer %q", states(ins), ins[0].Error, r.offerOf("in00"))
	}
	if ins[1].State != store.RIRunning || !strings.Contains(ins[1].Error, "deferred by the customer") {
		t.Fatalf("deferring agent: %s (%s)", ins[1].State, ins[1].Error)
	}
}

func findOffer(t *testing.T, r *rig, id, name string) string {
	t.Helper()
	_, ins := r.get(id)
	for _, in := range ins {
		if in.InstallName == name {
			return in.OfferID
		}
	}
	return ""
}

// A rollout's bad requests are refused naming the field: canary and
// waves together, a label key that is not one, a selector that picks
// nothing, installs of two apps without --app.
func TestAgentRolloutRefusals(t *testing.T) {
	r := newRig(t, 2)
	ctx := t.Context()
	must(t, r.st.CreateApp(ctx, store.App{ID: "app_2", Name: "other", CreatedAt: r.now()}))
	must(t, r.st.CreateInstall(ctx, store.Install{ID: "ins_x", AppID: "app_2", Name: "x", CreatedAt: r.now(), Inputs: map[string]string{}},
		store.EnrollmentToken{Hash: "hx", ExpiresAt: r.now().Add(time.Hour), CreatedAt: r.now()}))
	for _, c := range []struct {
		req  AgentRolloutRequest
		want string
	}{
		{AgentRolloutRequest{Release: goodRelease, AppID: "app_1", Canary: 1, Waves: "1,100%"}, "canary: give --canary or --waves"},
		{AgentRolloutRequest{Release: goodRelease, AppID: "app_1", GroupBy: "not a key!"}, "group_by"},
		{AgentRolloutRequest{Release: goodRelease, AppID: "app_1", Selector: "tier=none"}, "no install matches selector tier=none"},
		{AgentRolloutRequest{Release: goodRelease}, "belong to 2 apps (app_1, app_2)"},
	} {
		if _, err := r.e.CreateAgentRollout(ctx, c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.req, err, c.want)
		}
	}
	// With --app, the other app's install (no agent) is left out.
	rel, err := r.e.CreateAgentRollout(ctx, AgentRolloutRequest{Release: goodRelease, AppID: "app_2", By: "ops"})
	must(t, err)
	if _, ins := r.get(rel.ID); states(ins) != "x:0:skipped" || !strings.Contains(ins[0].Error, "no agent") {
		t.Fatalf("install without an agent: %s", states(ins))
	}
}

// --group-by makes one wave per value of the label, after the canary;
// installs without the label come last.
func TestAgentRolloutGroupBy(t *testing.T) {
	r := newRig(t, 5)
	ctx := t.Context()
	for name, region := range map[string]string{"in00": "us", "in01": "eu", "in02": "us", "in03": "eu"} {
		_, err := r.st.SetInstallLabels(ctx, "ins_"+name, map[string]string{"region": region}, "ops", r.now())
		must(t, err)
	}
	rel, err := r.e.CreateAgentRollout(ctx, AgentRolloutRequest{Release: goodRelease, Canary: 1, GroupBy: "region", By: "ops"})
	must(t, err)
	var got []string
	for _, w := range rel.Waves {
		got = append(got, fmt.Sprintf("%s:%d", w.Name, w.Size))
	}
	if strings.Join(got, ",") != "canary:1,region=eu:1,region=us:2,no region:1" {
		t.Fatalf("waves %v", got)
	}
	if _, ins := r.get(rel.ID); states(ins) != "in01:0:pending in03:1:pending in00:2:pending in02:2:pending in04:3:pending" {
		t.Fatalf("installs %s", states(ins))
	}
}

// The vendor's build agent's reserved install (_vendor) is no customer's:
// an agent rollout of every install, or of a selector it matches, and the
// installs a release selects leave it out.
func TestRolloutsLeaveTheVendorInstallOut(t *testing.T) {
	r := newRig(t, 2)
	ctx := t.Context()
	must(t, r.st.CreateBuildAgentToken(ctx, store.EnrollmentToken{Hash: "hbuild", ExpiresAt: r.now().Add(time.Hour), CreatedAt: r.now()}))
	_, err := r.st.Enroll(ctx, "hbuild", store.Agent{ID: "agent_build", PublicKey: []byte("kbuild"), Build: true}, r.now())
	must(t, err)
	for _, sel := range []string{"", "!tier"} {
		rel, err := r.e.CreateAgentRollout(ctx, AgentRolloutRequest{Release: goodRelease, Selector: sel, By: "ops"})
		if err != nil {
			t.Fatalf("agent rollout of %q: %v", sel, err)
		}
		_, ins := r.get(rel.ID)
		if rel.AppID != "app_1" || states(ins) != "in00:0:pending in01:0:pending" {
			t.Fatalf("agent rollout of %q: app %s, %s", sel, rel.AppID, states(ins))
		}
	}
	for _, sel := range []string{"", "!tier"} {
		ins, err := ByLabels{Store: r.st}.Installs(ctx, "", sel)
		must(t, err)
		for _, in := range ins {
			if in.ID == store.VendorInstallID {
				t.Fatalf("ByLabels(%q) selected the vendor install", sel)
			}
		}
	}
}
