package schedule

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/schema/app/config"
)

var app = map[string][]byte{
	"app.toml": []byte("name = \"shop\"\n"),
	"actions/every_minute.toml": []byte(`health_check = true
[[trigger]]
type = "cron"
schedule = "* * * * *"
[[step]]
name = "probe"
script = "true"
`),
	"actions/every_five.toml": []byte(`[[trigger]]
type = "cron"
schedule = "*/5 * * * *"
[[step]]
name = "s"
script = "true"
`),
	"actions/by_hand.toml": []byte("[[step]]\nname = \"s\"\nscript = \"true\"\n"),
}

// clock is a fake clock shared by the schedulers of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

type rig struct {
	t     *testing.T
	path  string
	clock *clock
	st    *store.Store
	sched *Scheduler
}

func (r *rig) open() *Scheduler {
	st, err := store.Open(context.Background(), r.path)
	must(r.t, err)
	r.t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r.st = st
	return New(st, workflow.NewEngine(st, dispatch.NewHub(), r.clock.now, log), r.clock.now, log)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2026, 11, 21, 10, 0, 30, 0, time.UTC)

// newRig makes an active install of app at revision 1, created at t0.
func newRig(t *testing.T) *rig {
	r := &rig{t: t, path: filepath.Join(t.TempDir(), "imsd.db"), clock: &clock{t: t0}}
	r.sched = r.open()
	ctx := t.Context()
	must(t, r.st.CreateApp(ctx, store.App{ID: "app_1", Name: "shop", CreatedAt: t0}))
	_, _, err := r.st.CreateAppRevision(ctx, store.AppRevision{AppID: "app_1", Digest: config.Digest(app), Files: app, CreatedAt: t0})
	must(t, err)
	must(t, r.st.CreateInstall(ctx, store.Install{ID: "ins_1", AppID: "app_1", Name: "acme", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	// A provision of an app without components ends at once: the
	// install is active at revision 1.
	must(t, r.st.CreateWorkflow(ctx, store.Workflow{ID: "wf_prov", InstallID: "ins_1", Kind: workflow.Provision, AppRevision: 1, Parallelism: 1, CreatedAt: t0}))
	must(t, r.sched.eng.Advance(ctx, "wf_prov"))
	if in, _ := r.st.GetInstall(ctx, "ins_1"); in.State != store.InstallActive {
		t.Fatalf("install %s", in.State)
	}
	return r
}

// pass runs a pass of s and ends the runs it queued (as if they ran).
func (r *rig) pass(s *Scheduler) []string {
	r.t.Helper()
	ids, err := s.Pass(r.t.Context())
	must(r.t, err)
	for _, id := range ids {
		_, err := r.st.EndActionRun(r.t.Context(), id, store.WorkflowSucceeded, "", nil, r.clock.now())
		must(r.t, err)
	}
	return ids
}

// runs counts the cron runs of each action.
func (r *rig) runs() map[string]int {
	runs, err := r.st.ListActionRuns(r.t.Context(), store.ActionRunFilter{InstallID: "ins_1"})
	must(r.t, err)
	out := map[string]int{}
	for _, run := range runs {
		if run.Workflow.Trigger != workflow.TriggerCron {
			r.t.Fatalf("run %s trigger %q", run.Workflow.ID, run.Workflow.Trigger)
		}
		out[run.Workflow.Action]++
	}
	return out
}

// Every tick fires once: passes within one tick, a second scheduler (a
// replica on the same database) and a restart fire nothing more; after
// downtime only the latest missed tick fires.
func TestSchedulerOncePerTick(t *testing.T) {
	r := newRig(t)
	// 10:00:30, nothing due yet (the install was created at 10:00:30).
	if ids := r.pass(r.sched); len(ids) != 0 {
		t.Fatalf("fired %v before any tick", ids)
	}
	replica := r.open()
	for minute := 1; minute <= 10; minute++ {
		// Several passes by both schedulers across the tick, at the
		// tick itself and within the minute after.
		for _, sec := range []int{0, 0, 20, 59} {
			r.clock.set(time.Date(2026, 11, 21, 10, minute, sec, 0, time.UTC))
			r.pass(r.sched)
			r.pass(replica)
		}
		if minute == 4 {
			// imsd restarts: a new store and scheduler on the database.
			r.sched = r.open()
		}
	}
	got := r.runs()
	// every_minute: 10:01..10:10; every_five: 10:05 and 10:10.
	if got["every_minute"] != 10 || got["every_five"] != 2 || got["by_hand"] != 0 {
		t.Fatalf("runs %v, want every_minute 10, every_five 2", got)
	}

	// imsd is down from 10:10 to 10:37: one run per action for everything
	// missed (10:11..10:37 and 10:15..10:35), not one per missed tick.
	r.clock.set(time.Date(2026, 11, 21, 10, 37, 10, 0, time.UTC))
	s := r.open()
	ids := r.pass(s)
	if len(ids) != 2 {
		t.Fatalf("after downtime fired %d runs, want 2 (the latest missed tick of each action)", len(ids))
	}
	last, err := r.st.LastTicks(t.Context())
	must(t, err)
	if !last["ins_1"]["every_minute"].Equal(time.Date(2026, 11, 21, 10, 37, 0, 0, time.UTC)) ||
		!last["ins_1"]["every_five"].Equal(time.Date(2026, 11, 21, 10, 35, 0, 0, time.UTC)) {
		t.Fatalf("last ticks %v", last)
	}
	if ids := r.pass(s); len(ids) != 0 {
		t.Fatalf("second pass fired %v", ids)
	}
}

// A tick while the action's previous run has not ended is skipped, so
// runs never pile up behind a busy install.
func TestSchedulerSkipsWhileRunActive(t *testing.T) {
	r := newRig(t)
	r.clock.set(time.Date(2026, 11, 21, 10, 1, 0, 0, time.UTC))
	ids, err := r.sched.Pass(t.Context())
	must(t, err)
	if len(ids) != 1 {
		t.Fatalf("fired %v, want every_minute's 10:01 run", ids)
	}
	for m := 2; m <= 4; m++ {
		r.clock.set(time.Date(2026, 11, 21, 10, m, 0, 0, time.UTC))
		more, err := r.sched.Pass(t.Context())
		must(t, err)
		if len(more) != 0 {
			t.Fatalf("10:0%d fired %v while the 10:01 run is queued", m, more)
		}
	}
	if got := r.runs(); got["every_minute"] != 1 {
		t.Fatalf("runs %v", got)
	}
	_, err = r.st.EndActionRun(t.Context(), ids[0], store.WorkflowSucceeded, "", nil, r.clock.now())
	must(t, err)
	r.clock.set(time.Date(2026, 11, 21, 10, 5, 0, 0, time.UTC))
	if ids := r.pass(r.sched); len(ids) != 2 {
		t.Fatalf("10:05 fired %v, want every_minute and every_five", ids)
	}
}
