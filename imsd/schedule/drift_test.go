package schedule

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/schema/app/config"
)

var driftApp = map[string][]byte{
	"app.toml": []byte("name = \"shop\"\n"),
	"components/db.toml": []byte(`type = "terraform"
drift_schedule = "*/10 * * * *"
[config]
dir = "db"
`),
	"components/web.toml": []byte("type = \"helm\"\n[config]\nchart = \"web\"\n"),
}

// newDriftRig makes an install that runs driftApp: its provision's jobs
// were run by a scripted agent.
func newDriftRig(t *testing.T) *rig {
	r := &rig{t: t, path: t.TempDir() + "/imsd.db", clock: &clock{t: t0}}
	r.sched = r.open()
	ctx := t.Context()
	must(t, r.st.CreateApp(ctx, store.App{ID: "app_1", Name: "shop", CreatedAt: t0}))
	_, _, err := r.st.CreateAppRevision(ctx, store.AppRevision{AppID: "app_1", Digest: config.Digest(driftApp), Files: driftApp, CreatedAt: t0})
	must(t, err)
	must(t, r.st.CreateInstall(ctx, store.Install{ID: "ins_1", AppID: "app_1", Name: "acme", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	_, err = r.st.Enroll(ctx, "h", store.Agent{ID: "agent_1", PublicKey: []byte("k")}, t0)
	must(t, err)
	must(t, r.st.CreateWorkflow(ctx, store.Workflow{ID: "wf_prov", InstallID: "ins_1", Kind: workflow.Provision, AppRevision: 1, Parallelism: 2, CreatedAt: t0}))
	for range 10 {
		must(t, r.sched.eng.Advance(ctx, "wf_prov"))
		if r.agentRound(nil) == 0 {
			break
		}
	}
	if in, _ := r.st.GetInstall(ctx, "ins_1"); in.State != store.InstallActive {
		t.Fatalf("install %s", in.State)
	}
	return r
}

// agentRound runs every queued job to success, the drift checks reporting
// drifted[component]; it returns how many jobs it ran.
func (r *rig) agentRound(drifted map[string]bool) int {
	ctx := r.t.Context()
	now := r.clock.now()
	jobs, err := r.st.ClaimJobs(ctx, "ins_1", store.Writer{AgentID: "agent_1"}, 100, now.Add(time.Minute), now)
	must(r.t, err)
	for _, j := range jobs {
		w := store.Writer{AgentID: "agent_1", FencingToken: j.FencingToken}
		must(r.t, r.st.AckJob(ctx, j.ID, w, now.Add(time.Minute), now))
		_, err := r.st.FinishJob(ctx, j.ID, w, store.Result{State: store.JobSucceeded, Drifted: drifted[j.Component]}, now)
		must(r.t, err)
	}
	return len(jobs)
}

// Drift checks are queued on their component's schedule, once per tick
// across replicas, never two at once, and their results become the
// component's drift state.
func TestDriftPass(t *testing.T) {
	r := newDriftRig(t)
	ctx := t.Context()
	got, err := r.sched.DriftPass(ctx)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("queued %v before the first tick", got)
	}
	r.clock.set(t0.Add(10 * time.Minute)) // 10:10:30, past the 10:10 tick
	got, err = r.sched.DriftPass(ctx)
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("queued %v at the first tick, want one check of db", got)
	}
	j, err := r.st.GetJob(ctx, got[0])
	must(t, err)
	if j.Operation != "drift" || j.Component != "db" || j.Mode != store.ModeMaintenance || j.CreatedBy != "drift schedule" {
		t.Fatalf("job %+v", j)
	}
	// The same tick again, from this scheduler and from a replica.
	for _, s := range []*Scheduler{r.sched, r.open()} {
		if again, err := s.DriftPass(ctx); err != nil || len(again) != 0 {
			t.Fatalf("same tick queued %v, %v", again, err)
		}
	}
	// The next tick while the check is still queued: skipped.
	r.clock.set(t0.Add(20 * time.Minute))
	if again, err := r.sched.DriftPass(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a tick during a check queued %v, %v", again, err)
	}
	if n := r.agentRound(map[string]bool{"db": true}); n != 1 {
		t.Fatalf("ran %d jobs", n)
	}
	drift, err := r.st.ListDrift(ctx, "ins_1")
	must(t, err)
	if len(drift) != 1 || drift[0].Component != "db" || drift[0].Status != store.DriftDrifted || drift[0].JobID != got[0] {
		t.Fatalf("drift %+v", drift)
	}
	// Missed ticks are not replayed: an hour later, one check.
	r.clock.set(t0.Add(80 * time.Minute))
	got, err = r.sched.DriftPass(ctx)
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("queued %v after missed ticks, want one", got)
	}
	r.agentRound(nil)
	drift, err = r.st.ListDrift(ctx, "ins_1")
	must(t, err)
	if drift[0].Status != store.DriftInSync || drift[0].JobID != got[0] {
		t.Fatalf("drift %+v", drift)
	}
}
