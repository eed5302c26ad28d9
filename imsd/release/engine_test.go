package release

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// rig is a real store, workflow engine and release engine over n
// installs of one app, and a scripted agent per install that runs every
// queued job to its end.
type rig struct {
	t     *testing.T
	path  string
	st    *store.Store
	wf    *workflow.Engine
	e     *Engine
	hub   *dispatch.Hub
	clock atomic.Int64
	names []string
	// fail says why an install's jobs fail ("" succeeds).
	mu   sync.Mutex
	fail map[string]string
}

func (r *rig) now() time.Time { return time.Unix(0, r.clock.Load()) }

func appFiles(msg string) map[string][]byte {
	return map[string][]byte{
		"app.toml":            []byte("name = \"shop\"\n"),
		"components/web.toml": []byte("type = \"action\"\n[config]\nsteps = [{ script = \"echo " + msg + "\" }]\n"),
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newRig(t *testing.T, n int) *rig {
	t.Helper()
	r := &rig{t: t, path: filepath.Join(t.TempDir(), "imsd.db"), fail: map[string]string{}}
	r.clock.Store(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano())
	r.open()
	ctx := t.Context()
	must(t, r.st.CreateApp(ctx, store.App{ID: "app_1", Name: "shop", CreatedAt: r.now()}))
	r.push("v1")
	for i := range n {
		name := fmt.Sprintf("in%02d", i)
		r.names = append(r.names, name)
		in := store.Install{ID: "ins_" + name, AppID: "app_1", Name: name, CreatedAt: r.now(), Inputs: map[string]string{}}
		must(t, r.st.CreateInstall(ctx, in, store.EnrollmentToken{Hash: "h" + name, ExpiresAt: r.now().Add(time.Hour), CreatedAt: r.now()}))
		_, err := r.st.Enroll(ctx, "h"+name, store.Agent{ID: "agent_" + name, PublicKey: []byte("k" + name)}, r.now())
		must(t, err)
		id := "wf_prov_" + name
		must(t, r.st.CreateWorkflow(ctx, store.Workflow{ID: id, InstallID: in.ID, Kind: workflow.Provision, AppRevision: 1,
			Parallelism: 1, CreatedAt: r.now()}))
	}
	r.settle(func() bool { return false })
	return r
}

func (r *rig) open() {
	st, err := store.Open(context.Background(), r.path)
	must(r.t, err)
	r.st = st
	r.hub = dispatch.NewHub()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r.wf = workflow.NewEngine(st, r.hub, r.now, log)
	r.e = NewEngine(st, r.hub, r.wf, r.now, log)
	r.t.Cleanup(func() { st.Close() })
}

func (r *rig) push(msg string) int64 {
	r.t.Helper()
	files := appFiles(msg)
	rev, _, err := r.st.CreateAppRevision(r.t.Context(), store.AppRevision{AppID: "app_1", Digest: config.Digest(files), Files: files, CreatedAt: r.now()})
	must(r.t, err)
	return rev.Number
}

// agents runs every queued job of every install to its end; it reports
// whether any ran.
func (r *rig) agents() bool {
	ctx := r.t.Context()
	ran := false
	for _, name := range r.names {
		w := store.Writer{AgentID: "agent_" + name}
		jobs, err := r.st.ClaimJobs(ctx, "ins_"+name, w, 100, r.now().Add(time.Minute), r.now())
		must(r.t, err)
		for _, j := range jobs {
			ran = true
			w.FencingToken = j.FencingToken
			must(r.t, r.st.AckJob(ctx, j.ID, w, r.now().Add(time.Minute), r.now()))
			res := store.Result{State: store.JobSucceeded}
			r.mu.Lock()
			msg := r.fail[name]
			r.mu.Unlock()
			if msg != "" {
				res = store.Result{State: store.JobFailed, ExitCode: 1, Error: msg}
			}
			_, err := r.st.FinishJob(ctx, j.ID, w, res, r.now())
			must(r.t, err)
		}
	}
	return ran
}

// settle advances every workflow and release and runs the agents until
// nothing moves or done says so.
func (r *rig) settle(done func() bool) {
	r.t.Helper()
	ctx := r.t.Context()
	for range 200 {
		ids, err := r.st.WorkflowsToAdvance(ctx, false)
		must(r.t, err)
		for _, id := range ids {
			must(r.t, r.wf.Advance(ctx, id))
		}
		rels, err := r.st.ReleasesToAdvance(ctx)
		must(r.t, err)
		for _, id := range rels {
			must(r.t, r.e.Advance(ctx, id))
		}
		if done() {
			return
		}
		after, err := r.st.WorkflowsToAdvance(ctx, false)
		must(r.t, err)
		if !r.agents() && len(ids) == 0 && len(after) == 0 {
			return // nothing ran and no workflow is left
		}
	}
	r.t.Fatal("the fleet did not settle")
}

func (r *rig) get(id string) (store.Release, []store.ReleaseInstall) {
	r.t.Helper()
	rel, ins, err := r.st.GetRelease(r.t.Context(), id)
	must(r.t, err)
	return rel, ins
}

func states(ins []store.ReleaseInstall) string {
	var b strings.Builder
	for _, in := range ins {
		fmt.Fprintf(&b, "%s:%d:%s ", in.InstallName, in.Wave, in.State)
	}
	return strings.TrimSpace(b.String())
}

func TestParseWaves(t *testing.T) {
	for _, c := range []struct {
		spec string
		n    int
		want string
		err  string
	}{
		{"canary:2,10%,50%,100%", 20, "canary=2 wave 2=0 wave 3=8 wave 4=10", ""},
		{"1%,10%,100%", 10000, "wave 1=100 wave 2=900 wave 3=9000", ""},
		{"", 3, "wave 1=3", ""},
		{"canary:2,50%", 10, "", "roll out 5 of the 10"},
		{"0", 3, "", "a wave is a count"},
		{"120%", 3, "", "at most 100%"},
		{":2,100%", 3, "", "a name is"},
	} {
		waves, err := ParseWaves(c.spec, c.n)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseWaves(%q, %d) = %v, want error with %q", c.spec, c.n, err, c.err)
			}
			continue
		}
		must(t, err)
		var got []string
		for _, w := range waves {
			got = append(got, fmt.Sprintf("%s=%d", w.Name, w.Size))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("ParseWaves(%q, %d) = %s, want %s", c.spec, c.n, strings.Join(got, " "), c.want)
		}
	}
	for spec, want := range map[string]int{"5%": 1, "": 0, "3": 3, "10%": 2} {
		got, err := ParseMaxFailures(spec, 20)
		must(t, err)
		if got != want {
			t.Errorf("ParseMaxFailures(%q, 20) = %d, want %d", spec, got, want)
		}
	}
	if _, err := ParseMaxFailures("-1", 20); err == nil {
		t.Error("ParseMaxFailures(-1) took it")
	}
}

// A release rolls out wave by wave, halts past its failure threshold
// leaving later waves untouched, and after the failure is fixed a retry
// finishes it; a rollback then takes every install back, last wave first.
func TestReleaseHaltRetryRollback(t *testing.T) {
	r := newRig(t, 8)
	ctx := t.Context()
	rev := r.push("v2")
	r.fail["in02"], r.fail["in03"] = "boom", "boom"
	rel, err := r.e.Create(ctx, CreateRequest{AppID: "app_1", Revision: rev, Waves: "canary:2,50%,100%", MaxFailures: "1", By: "ops"})
	must(t, err)
	if len(rel.PlanGroups) != 1 || rel.PlanGroups[0].Installs != 8 {
		t.Fatalf("plan groups = %+v, want one of 8 installs", rel.PlanGroups)
	}
	r.settle(func() bool { got, _ := r.get(rel.ID); return got.State == store.ReleaseHalted })
	got, ins := r.get(rel.ID)
	if got.State != store.ReleaseHalted || !strings.Contains(got.Error, "2 installs failed") {
		t.Fatalf("release %s (%s), want halted on 2 failures; %s", got.State, got.Error, states(ins))
	}
	if want := "in00:0:succeeded in01:0:succeeded in02:1:failed in03:1:failed in04:2:pending in05:2:pending in06:2:pending in07:2:pending"; states(ins) != want {
		t.Fatalf("installs:\n got %s\nwant %s", states(ins), want)
	}
	// Fixed: a retry runs the failed ones again and the rest.
	r.mu.Lock()
	clear(r.fail)
	r.mu.Unlock()
	_, err = r.st.ChangeRelease(ctx, rel.ID, store.ReleaseRetry, "ops", "fixed", r.now())
	must(t, err)
	r.settle(func() bool { got, _ := r.get(rel.ID); return got.State.Terminal() })
	got, ins = r.get(rel.ID)
	if got.State != store.ReleaseSucceeded {
		t.Fatalf("release %s (%s): %s", got.State, got.Error, states(ins))
	}
	for _, name := range r.names {
		in, err := r.st.GetInstall(ctx, "ins_"+name)
		must(t, err)
		if in.AppRevision != rev {
			t.Errorf("install %s at revision %d, want %d", name, in.AppRevision, rev)
		}
	}
	// Every workflow and job of the release names it.
	jobs, _, err := r.st.ListJobs(ctx, store.JobFilter{InstallID: "ins_in00"})
	must(t, err)
	named := 0
	for _, j := range jobs {
		if j.ReleaseID == rel.ID {
			named++
		}
	}
	if named == 0 {
		t.Error("no job of install in00 names the release")
	}

	back, err := r.e.Rollback(ctx, rel.ID, "bad revision", "ops")
	must(t, err)
	if back.Waves[0].Name != "undo wave 3" || back.Waves[2].Name != "undo canary" {
		t.Errorf("rollback waves = %+v, want the last wave first", back.Waves)
	}
	r.settle(func() bool { got, _ := r.get(back.ID); return got.State.Terminal() })
	got, ins = r.get(back.ID)
	if got.State != store.ReleaseSucceeded {
		t.Fatalf("rollback %s (%s): %s", got.State, got.Error, states(ins))
	}
	for _, name := range r.names {
		in, err := r.st.GetInstall(ctx, "ins_"+name)
		must(t, err)
		if in.AppRevision != 1 {
			t.Errorf("install %s at revision %d after the rollback, want 1", name, in.AppRevision)
		}
	}
	if _, err := r.e.Rollback(ctx, rel.ID, "", "ops"); err == nil {
		t.Error("a second rollback of the same release was made")
	}
	events, err := r.st.ListAuditEvents(ctx, store.AuditFilter{Chain: store.VendorChain, OneChain: true})
	must(t, err)
	kinds := map[string]int{}
	for _, ev := range events {
		if strings.HasPrefix(ev.Subject, "release:"+rel.ID) {
			kinds[ev.Kind]++
		}
	}
	for _, k := range []string{"release.created", "release.wave_started", "release.halted", "release.retried", "release.rolled_back", "release.ended"} {
		if kinds[k] == 0 {
			t.Errorf("no %s audit event for the release (have %v)", k, kinds)
		}
	}
}

// fakeWindows keeps installs closed until open.
type fakeWindows struct {
	mu     sync.Mutex
	closed map[string]time.Time
}

func (f *fakeWindows) Open(_ context.Context, in store.Install, now time.Time) (bool, time.Time, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.closed[in.Name]; ok && now.Before(at) {
		return false, at, "vendor window Sat 02:00-06:00 UTC", nil
	}
	return true, time.Time{}, "", nil
}

// An install whose window is closed waits, with when it opens, and the
// wave waits for it; it is deployed once the clock reaches its window.
// Pause and resume hold and release the rollout; two engines on one
// database (two replicas) start each install exactly once.
func TestReleaseWindowsPauseAndReplicas(t *testing.T) {
	r := newRig(t, 4)
	ctx := t.Context()
	opens := r.now().Add(3 * time.Hour)
	win := &fakeWindows{closed: map[string]time.Time{"in01": opens}}
	r.e.Windows = win
	other := NewEngine(r.st, r.hub, r.wf, r.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	other.Windows = win
	rev := r.push("v2")
	rel, err := r.e.Create(ctx, CreateRequest{AppID: "app_1", Revision: rev, Waves: "2,100%", RespectWindows: true, By: "ops"})
	must(t, err)
	// Both engines advance at once.
	var wg sync.WaitGroup
	for _, e := range []*Engine{r.e, other} {
		wg.Go(func() { must(t, e.Advance(ctx, rel.ID)) })
	}
	wg.Wait()
	r.settle(func() bool {
		_, ins := r.get(rel.ID)
		return ins[0].State == store.RISucceeded && ins[1].State == store.RIWaiting
	})
	_, ins := r.get(rel.ID)
	if ins[1].State != store.RIWaiting || !ins[1].WindowOpensAt.Equal(opens) || !strings.Contains(ins[1].Error, "vendor window") {
		t.Fatalf("in01 = %s (%s, opens %s), want waiting until %s", ins[1].State, ins[1].Error, ins[1].WindowOpensAt, opens)
	}
	if ins[2].State != store.RIPending {
		t.Fatalf("the second wave started before the first ended: %s", states(ins))
	}
	_, err = r.st.ChangeRelease(ctx, rel.ID, store.ReleasePause, "ops", "lunch", r.now())
	must(t, err)
	r.clock.Add(int64(4 * time.Hour)) // the window opens
	r.settle(func() bool { return false })
	_, ins = r.get(rel.ID)
	if ins[1].State != store.RIWaiting {
		t.Fatalf("a paused release started in01: %s", states(ins))
	}
	_, err = r.st.ChangeRelease(ctx, rel.ID, store.ReleaseResume, "ops", "back", r.now())
	must(t, err)
	r.settle(func() bool { got, _ := r.get(rel.ID); return got.State.Terminal() })
	got, ins := r.get(rel.ID)
	if got.State != store.ReleaseSucceeded {
		t.Fatalf("release %s: %s", got.State, states(ins))
	}
	for _, name := range r.names {
		wfs, err := r.st.ListWorkflows(ctx, store.WorkflowFilter{InstallID: "ins_" + name})
		must(t, err)
		n := 0
		for _, wf := range wfs {
			if wf.ReleaseID == rel.ID {
				n++
			}
		}
		if n != 1 {
			t.Errorf("install %s has %d workflows of the release, want 1", name, n)
		}
	}
}

// A selector picks the installs by label; one that matches nothing, or
// does not parse, is refused naming the field.
func TestReleaseSelector(t *testing.T) {
	r := newRig(t, 4)
	ctx := t.Context()
	for _, name := range []string{"in00", "in02"} {
		_, err := r.st.SetInstallLabels(ctx, "ins_"+name, map[string]string{"tier": "canary"}, "ops", r.now())
		must(t, err)
	}
	rev := r.push("v2")
	rel, err := r.e.Create(ctx, CreateRequest{AppID: "app_1", Revision: rev, Selector: "tier!=canary", By: "ops"})
	must(t, err)
	_, ins := r.get(rel.ID)
	if got := states(ins); got != "in01:0:pending in03:0:pending" {
		t.Fatalf("selected %s, want in01 and in03", got)
	}
	if _, err := r.e.Create(ctx, CreateRequest{AppID: "app_1", Revision: rev, Selector: "tier=gold", By: "ops"}); err == nil ||
		!strings.Contains(err.Error(), "selector tier=gold") {
		t.Errorf("a selector matching nothing: %v", err)
	}
	if _, err := r.e.Create(ctx, CreateRequest{AppID: "app_1", Revision: rev, Selector: "tier in (", By: "ops"}); err == nil ||
		!strings.Contains(err.Error(), "selector") {
		t.Errorf("a bad selector: %v", err)
	}
}

// A release that requires approval starts no wave before it is approved,
// and a cancel ends what has not started.
func TestReleaseApprovalAndCancel(t *testing.T) {
	r := newRig(t, 3)
	ctx := t.Context()
	rev := r.push("v2")
	rel, err := r.e.Create(ctx, CreateRequest{AppID: "app_1", Revision: rev, Waves: "1,100%", RequireApproval: true, By: "ops"})
	must(t, err)
	r.settle(func() bool { return false })
	got, ins := r.get(rel.ID)
	if got.State != store.ReleaseAwaitingApproval || ins[0].State != store.RIPending {
		t.Fatalf("release %s: %s, want awaiting approval with nothing started", got.State, states(ins))
	}
	_, err = r.st.ChangeRelease(ctx, rel.ID, store.ReleaseApprove, "ops", "", r.now())
	must(t, err)
	r.settle(func() bool {
		got, _ := r.get(rel.ID)
		return got.State == store.ReleaseAwaitingApproval && got.CurrentWave == 1
	})
	got, ins = r.get(rel.ID)
	if got.State != store.ReleaseAwaitingApproval || got.CurrentWave != 1 || ins[0].State != store.RISucceeded {
		t.Fatalf("release %s at wave %d: %s, want the canary done and wave 2 awaiting approval", got.State, got.CurrentWave, states(ins))
	}
	_, err = r.st.ChangeRelease(ctx, rel.ID, store.ReleaseCancel, "ops", "changed my mind", r.now())
	must(t, err)
	r.settle(func() bool { got, _ := r.get(rel.ID); return got.State.Terminal() })
	got, ins = r.get(rel.ID)
	if got.State != store.ReleaseCancelled || ins[1].State != store.RICancelled {
		t.Fatalf("release %s: %s, want cancelled", got.State, states(ins))
	}
}
