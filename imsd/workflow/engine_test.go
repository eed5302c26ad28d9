package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// rig is a real store and engine, and a scripted agent that runs every
// queued job of the install to the end in rounds.
type rig struct {
	t       *testing.T
	path    string
	st      *store.Store
	e       *Engine
	install store.Install
	clock   atomic.Int64
	// fail decides a job's result: "" succeeds.
	fail func(step string) string
	// off lists the permission modes the scripted agent refuses, as a
	// customer who turned them off; modes records each step's job's mode.
	off   map[store.Mode]bool
	modes map[string]store.Mode
	// rounds are the step names each round of the agent finished.
	rounds [][]string
	// plans are the plans the scripted agent makes, by step (default: one
	// change, "create STEP"); applied records the approved digest each
	// apply carried.
	plans   map[string][]store.PlannedChange
	applied map[string]string
}

// planOf is the scripted agent's plan of a step, with its digest.
func (r *rig) planOf(step string) ([]store.PlannedChange, string) {
	changes, ok := r.plans[step]
	if !ok {
		changes = []store.PlannedChange{{Address: step, Action: "create", After: json.RawMessage(`{"n":1}`)}}
	}
	d, err := JobPlanDigest(store.Job{PlannedChanges: changes})
	must(r.t, err)
	return changes, d
}

func (r *rig) now() time.Time {
	return time.Unix(0, r.clock.Add(int64(time.Second)))
}

func newRig(t *testing.T, files map[string][]byte, settings store.InstallSettings) *rig {
	t.Helper()
	r := &rig{t: t, path: filepath.Join(t.TempDir(), "imsd.db"), fail: func(string) string { return "" }}
	r.clock.Store(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano())
	r.open()
	ctx := t.Context()
	app := store.App{ID: "app_1", Name: "shop", CreatedAt: r.now()}
	must(t, r.st.CreateApp(ctx, app))
	r.push(files)
	r.install = store.Install{ID: "ins_1", AppID: app.ID, Name: "acme", CreatedAt: r.now(), Settings: settings, Inputs: map[string]string{}}
	must(t, r.st.CreateInstall(ctx, r.install, store.EnrollmentToken{Hash: "h", ExpiresAt: r.now().Add(time.Hour), CreatedAt: r.now()}))
	_, err := r.st.Enroll(ctx, "h", store.Agent{ID: "agent_1", PublicKey: []byte("k")}, r.now())
	must(t, err)
	return r
}

func (r *rig) open() {
	st, err := store.Open(context.Background(), r.path)
	must(r.t, err)
	r.st = st
	r.e = NewEngine(st, dispatch.NewHub(), r.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.t.Cleanup(func() { st.Close() })
}

// restart is an imsd restart: a new store and engine on the same database.
func (r *rig) restart() {
	r.st.Close()
	r.open()
}

func (r *rig) push(files map[string][]byte) int64 {
	r.t.Helper()
	rev, _, err := r.st.CreateAppRevision(r.t.Context(), store.AppRevision{AppID: "app_1", Digest: config.Digest(files), Files: files, CreatedAt: r.now()})
	must(r.t, err)
	return rev.Number
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var wfSeq atomic.Int64

func (r *rig) queue(kind string, rev int64, approval bool) string {
	r.t.Helper()
	id := fmt.Sprintf("wf_%d", wfSeq.Add(1))
	must(r.t, r.st.CreateWorkflow(r.t.Context(), store.Workflow{ID: id, InstallID: r.install.ID, Kind: kind, AppRevision: rev,
		Parallelism: max(r.install.Settings.Parallelism, 1), RequireApproval: approval, CreatedAt: r.now()}))
	return id
}

// stepOf maps a job to its step through the workflow's steps.
func (r *rig) stepOf(wfID, jobID string) string {
	_, steps, err := r.st.GetWorkflow(r.t.Context(), wfID)
	must(r.t, err)
	for _, s := range steps {
		if s.JobID == jobID || s.PlanJobID == jobID {
			return s.Name
		}
	}
	return "?"
}

// agentRound runs every queued job to its end, as the agent would.
func (r *rig) agentRound(wfID string) []string {
	ctx := r.t.Context()
	jobs, err := r.st.ClaimJobs(ctx, r.install.ID, store.Writer{AgentID: "agent_1"}, 100, r.now().Add(time.Minute), r.now())
	must(r.t, err)
	var names []string
	steps := r.steps(wfID)
	for _, j := range jobs {
		name := r.stepOf(wfID, j.ID)
		names = append(names, name)
		// The agent keeps the component's state directory by this name.
		if want := steps[name].Component; j.Component != want {
			r.t.Fatalf("job of step %s names component %q, want %q", name, j.Component, want)
		}
		w := store.Writer{AgentID: "agent_1", FencingToken: j.FencingToken}
		err := r.st.AckJob(ctx, j.ID, w, r.now().Add(time.Minute), r.now())
		must(r.t, err)
		if r.modes == nil {
			r.modes = map[string]store.Mode{}
		}
		r.modes[name] = j.Mode
		res := store.Result{State: store.JobSucceeded, Outputs: map[string]string{"x": "1", "y": "2"}}
		changes, digest := r.planOf(name)
		switch {
		case j.Operation == OpPlan || j.Operation == OpPlanDestroy:
			name += ":" + j.Operation
			names[len(names)-1] = name
			res = store.Result{State: store.JobSucceeded, PlannedChanges: changes, PlanDigest: digest}
		case j.ApprovedPlanDigest != "":
			if r.applied == nil {
				r.applied = map[string]string{}
			}
			r.applied[name] = j.ApprovedPlanDigest
			if digest != j.ApprovedPlanDigest {
				res = store.Result{State: store.JobFailed, ExitCode: -1, Error: "plan changed since approval", PlannedChanges: changes, PlanDigest: digest}
			} else {
				res.PlanDigest = digest
			}
		}
		if msg := r.fail(name); msg != "" {
			res = store.Result{State: store.JobFailed, ExitCode: 1, Error: msg}
		}
		if r.off[j.Mode] {
			res = store.Result{State: store.JobRefused, ExitCode: -1, Error: "refused: " + string(j.Mode) + " is turned off in the customer's account"}
		}
		_, err = r.st.FinishJob(ctx, j.ID, w, res, r.now())
		must(r.t, err)
	}
	slices.Sort(names)
	return names
}

// drive advances wfID and runs its jobs until it ends or stops moving.
func (r *rig) drive(wfID string) store.Workflow {
	r.t.Helper()
	r.rounds = nil
	for range 50 {
		must(r.t, r.e.Advance(r.t.Context(), wfID))
		wf, _, err := r.st.GetWorkflow(r.t.Context(), wfID)
		must(r.t, err)
		if wf.State.Terminal() || wf.State == store.WorkflowAwaitingApproval || wf.State == store.WorkflowQueued {
			return wf
		}
		if names := r.agentRound(wfID); len(names) > 0 {
			r.rounds = append(r.rounds, names)
		}
	}
	r.t.Fatalf("workflow %s did not end", wfID)
	return store.Workflow{}
}

func (r *rig) steps(wfID string) map[string]store.Step {
	_, steps, err := r.st.GetWorkflow(r.t.Context(), wfID)
	must(r.t, err)
	m := map[string]store.Step{}
	for _, s := range steps {
		m[s.Name] = s
	}
	return m
}

func (r *rig) installState() store.Install {
	in, err := r.st.GetInstall(r.t.Context(), r.install.ID)
	must(r.t, err)
	return in
}

// Independent branches deploy together, within the install's parallelism;
// a changed input redeploys only what reads it and what is downstream.
func TestEngineParallelBranchesAndDownstreamOnly(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 2})
	wf := r.drive(r.queue(Provision, 1, false))
	if wf.State != store.WorkflowSucceeded {
		t.Fatalf("provision %s: %s", wf.State, wf.Error)
	}
	if got := fmt.Sprint(r.rounds); got != "[[a] [b c] [d]]" {
		t.Fatalf("provision rounds %s, want [[a] [b c] [d]]: b and c run together", got)
	}
	in := r.installState()
	if in.State != store.InstallActive || in.AppRevision != 1 {
		t.Fatalf("install %s at revision %d", in.State, in.AppRevision)
	}
	comps, err := r.st.InstallComponents(t.Context(), in.ID)
	must(t, err)
	if len(comps) != 4 || comps[3].Name != "d" || !slices.Equal(comps[3].Needs, []string{"b", "c"}) {
		t.Fatalf("deployed %+v", comps)
	}
	var dcfg map[string]any
	json.Unmarshal(comps[3].Config, &dcfg)
	if !strings.Contains(fmt.Sprint(dcfg["steps"]), "echo 1 2") {
		t.Fatalf("d was deployed with %v, want the outputs of b and c rendered in", dcfg)
	}

	must(t, func() error {
		_, err := r.st.UpdateInstall(t.Context(), in.ID, map[string]string{"size": "3"}, in.Settings, time.Now())
		return err
	}())
	wf = r.drive(r.queue(Update, 1, false))
	if wf.State != store.WorkflowSucceeded || fmt.Sprint(r.rounds) != "[[b] [d]]" {
		t.Fatalf("update %s (%s), rounds %v; want b then d", wf.State, wf.Error, r.rounds)
	}
	// Nothing changed since: an update runs no step at all.
	wf = r.drive(r.queue(Update, 1, false))
	if wf.State != store.WorkflowSucceeded || len(r.rounds) != 0 || len(r.steps(wf.ID)) != 0 {
		t.Fatalf("empty update %s, rounds %v", wf.State, r.rounds)
	}
}

// A failed component stops its own downstream branch only; retrying it
// runs it and what it held back.
func TestEngineFailureIsolationAndRetry(t *testing.T) {
	files := diamond(map[string]string{"components/e.toml": "type = \"action\"\n[config]\nsteps = [{ script = \"echo e\" }]\n"})
	r := newRig(t, files, store.InstallSettings{Parallelism: 4})
	r.fail = func(step string) string {
		if step == "c" {
			return "exit code 1"
		}
		return ""
	}
	id := r.queue(Provision, 1, false)
	wf := r.drive(id)
	if wf.State != store.WorkflowFailed {
		t.Fatalf("provision %s, want failed", wf.State)
	}
	st := r.steps(id)
	for name, want := range map[string]store.StepState{"a": store.StepSucceeded, "b": store.StepSucceeded, "e": store.StepSucceeded,
		"c": store.StepFailed, "d": store.StepSkipped} {
		if st[name].State != want {
			t.Errorf("step %s %s, want %s", name, st[name].State, want)
		}
	}
	if st["d"].Error != "not run: c failed" || !strings.Contains(wf.Error, "c failed") {
		t.Errorf("d: %q; workflow: %q", st["d"].Error, wf.Error)
	}
	if in := r.installState(); in.State != store.InstallFailed || in.AppRevision != 0 {
		t.Errorf("install %s at revision %d, want failed at 0", in.State, in.AppRevision)
	}

	r.fail = func(string) string { return "" }
	_, err := r.st.RetryStep(t.Context(), id, "c", r.now())
	must(t, err)
	wf = r.drive(id)
	if wf.State != store.WorkflowSucceeded || fmt.Sprint(r.rounds) != "[[c] [d]]" {
		t.Fatalf("after retry %s (%s), rounds %v; want c then d", wf.State, wf.Error, r.rounds)
	}
	if st := r.steps(id); st["c"].Attempts != 2 || st["a"].Attempts != 1 {
		t.Errorf("attempts: c %d a %d", st["c"].Attempts, st["a"].Attempts)
	}
	if in := r.installState(); in.State != store.InstallActive || in.AppRevision != 1 {
		t.Errorf("install %s at revision %d", in.State, in.AppRevision)
	}
}

// A workflow resumes after a restart where it was: nothing runs twice.
func TestEngineResumesAfterRestart(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 2})
	id := r.queue(Provision, 1, false)
	must(t, r.e.Advance(t.Context(), id)) // a starts
	if got := r.agentRound(id); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first round %v", got)
	}
	must(t, r.e.Advance(t.Context(), id)) // b and c start
	// imsd dies here, with b and c handed out; the agent finishes them
	// while it is down.
	r.restart()
	if got := r.agentRound(id); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("round while down %v", got)
	}
	wf := r.drive(id)
	if wf.State != store.WorkflowSucceeded || fmt.Sprint(r.rounds) != "[[d]]" {
		t.Fatalf("after restart %s (%s), rounds %v", wf.State, wf.Error, r.rounds)
	}
	jobs, _, err := r.st.ListJobs(t.Context(), store.JobFilter{InstallID: r.install.ID})
	must(t, err)
	if len(jobs) != 4 {
		t.Fatalf("%d jobs, want one per component", len(jobs))
	}
}

// A plan that needs approval waits for it; a cancelled workflow starts
// nothing more and cancels what was queued.
func TestEngineApprovalAndCancel(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 1})
	id := r.queue(Provision, 1, true)
	wf := r.drive(id)
	if wf.State != store.WorkflowAwaitingApproval || len(r.steps(id)) != 4 {
		t.Fatalf("%s with %d steps, want awaiting approval with the plan", wf.State, len(r.steps(id)))
	}
	// Another workflow of the install waits behind it.
	next := r.queue(Update, 1, false)
	if wf := r.drive(next); wf.State != store.WorkflowQueued {
		t.Fatalf("second workflow %s, want queued", wf.State)
	}
	// a, b and c are planned first; d needs b's and c's outputs, so it is
	// planned once they ran.
	if got := r.agentRound(id); !slices.Equal(got, []string{"a:plan", "b:plan", "c:plan"}) {
		t.Fatalf("plans %v", got)
	}
	must(t, r.e.Advance(t.Context(), id))
	_, err := r.st.ApproveWorkflow(t.Context(), id, "alice", nil, r.now())
	must(t, err)
	must(t, r.e.Advance(t.Context(), id))
	if got := r.agentRound(id); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after approval %v", got)
	}
	must(t, r.e.Advance(t.Context(), id)) // b queued (parallelism 1)
	_, err = r.st.RequestWorkflowCancel(t.Context(), id, "wrong", "ops", r.now())
	must(t, err)
	wf = r.drive(id)
	st := r.steps(id)
	if wf.State != store.WorkflowCancelled || st["b"].State != store.StepCancelled || st["d"].State != store.StepCancelled {
		t.Fatalf("%s: b %s d %s", wf.State, st["b"].State, st["d"].State)
	}
	if len(r.rounds) != 0 {
		t.Fatalf("jobs ran after the cancel: %v", r.rounds)
	}
	// The queued update starts once the install is free: it deploys what
	// the cancelled provision left out.
	wf = r.drive(next)
	if wf.State != store.WorkflowSucceeded || fmt.Sprint(r.rounds) != "[[b] [c] [d]]" {
		t.Fatalf("next workflow %s (%s), rounds %v", wf.State, wf.Error, r.rounds)
	}
}

// With approval required, every component apply is planned by the agent
// before anyone approves, the approval binds each plan's digest, the apply
// jobs carry it, and an apply whose fresh plan differs sends the workflow
// back to awaiting approval with that plan. A step that could not be
// planned before (it needs outputs of steps in the same workflow) is
// planned and approved once they ran.
func TestEngineApprovalBindsPlans(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 4})
	ctx := t.Context()
	id := r.queue(Provision, 1, true)
	if wf := r.drive(id); wf.State != store.WorkflowAwaitingApproval {
		t.Fatalf("%s, want awaiting approval", wf.State)
	}
	st := r.steps(id)
	for _, n := range []string{"a", "b", "c"} {
		if st[n].PlanJobID == "" || st[n].PlanDigest != "" {
			t.Fatalf("step %s: plan job %q digest %q, want a plan job running", n, st[n].PlanJobID, st[n].PlanDigest)
		}
	}
	if st["d"].PlanJobID != "" {
		t.Fatalf("d was planned before its inputs exist")
	}
	if _, err := r.st.ApproveWorkflow(ctx, id, "alice", nil, r.now()); err == nil || !strings.Contains(err.Error(), "still planning a, b, c") {
		t.Fatalf("approval while planning: %v", err)
	}
	r.plans = map[string][]store.PlannedChange{"b": {{Address: "b", Action: "update", Before: json.RawMessage(`{"n":1}`), After: json.RawMessage(`{"n":2}`)}}}
	r.agentRound(id)
	must(t, r.e.Advance(ctx, id))
	st = r.steps(id)
	_, bDigest := r.planOf("b")
	if st["b"].PlanDigest != bDigest {
		t.Fatalf("b's plan digest %q, want %q", st["b"].PlanDigest, bDigest)
	}
	// An approval naming a digest that is not the plan's is refused.
	seen := map[string]string{"a": st["a"].PlanDigest, "b": st["b"].PlanDigest, "c": st["c"].PlanDigest}
	stale := map[string]string{"a": seen["a"], "b": seen["a"], "c": seen["c"]}
	if _, err := r.st.ApproveWorkflow(ctx, id, "alice", stale, r.now()); err == nil || !strings.Contains(err.Error(), "the plan of step b changed since it was shown") {
		t.Fatalf("approval of a stale plan: %v", err)
	}
	if _, err := r.st.ApproveWorkflow(ctx, id, "alice", map[string]string{"a": seen["a"]}, r.now()); err == nil || !strings.Contains(err.Error(), "step b has a plan") {
		t.Fatalf("approval that leaves a plan out: %v", err)
	}
	_, err := r.st.ApproveWorkflow(ctx, id, "alice", seen, r.now())
	must(t, err)

	// c's plan changes between the approval and its apply.
	r.plans["c"] = []store.PlannedChange{{Address: "c", Action: "replace"}}
	wf := r.drive(id)
	if wf.State != store.WorkflowAwaitingApproval {
		t.Fatalf("%s (%s), want awaiting approval again", wf.State, wf.Error)
	}
	st = r.steps(id)
	_, cFresh := r.planOf("c")
	if r.applied["a"] != seen["a"] || r.applied["b"] != seen["b"] || r.applied["c"] != seen["c"] {
		t.Fatalf("apply jobs carried %v, want the approved %v", r.applied, seen)
	}
	if st["a"].State != store.StepSucceeded || st["b"].State != store.StepSucceeded || st["c"].State != store.StepPending ||
		st["c"].PlanDigest != cFresh || st["c"].ApprovedPlanDigest != "" || st["c"].PlanJobID != st["c"].JobID {
		t.Fatalf("after the changed plan: a %s, b %s, c %+v", st["a"].State, st["b"].State, st["c"])
	}
	if wf.ApprovedBy != "" {
		t.Fatalf("the approval survived a changed plan: %q", wf.ApprovedBy)
	}
	if _, err := r.st.ApproveWorkflow(ctx, id, "bob", map[string]string{"c": cFresh}, r.now()); err != nil {
		t.Fatal(err)
	}
	// c applies; d, planned now that c and b ran, asks again.
	wf = r.drive(id)
	if wf.State != store.WorkflowAwaitingApproval || r.applied["c"] != cFresh {
		t.Fatalf("%s (%s), c applied with %q want %q", wf.State, wf.Error, r.applied["c"], cFresh)
	}
	r.agentRound(id)
	must(t, r.e.Advance(ctx, id))
	st = r.steps(id)
	if st["d"].PlanDigest == "" {
		t.Fatalf("d was not planned: %+v", st["d"])
	}
	_, err = r.st.ApproveWorkflow(ctx, id, "carol", map[string]string{"d": st["d"].PlanDigest}, r.now())
	must(t, err)
	if wf = r.drive(id); wf.State != store.WorkflowSucceeded || r.applied["d"] != st["d"].PlanDigest {
		t.Fatalf("%s (%s), d applied with %q", wf.State, wf.Error, r.applied["d"])
	}
	// The audit log binds every approval to its plans.
	recs, err := r.st.ListAuditRecords(ctx, store.AuditFilter{Chain: r.install.ID, OneChain: true})
	must(t, err)
	var approvals, changed []string
	for _, rec := range recs {
		var data map[string]string
		must(t, json.Unmarshal([]byte(rec.Data), &data))
		switch rec.Kind {
		case "workflow.approved":
			approvals = append(approvals, rec.Actor+" "+data["plans"])
		case "workflow.plan_changed":
			changed = append(changed, data["approved_plan_digest"]+" -> "+data["plan_digest"])
		}
	}
	want := []string{"alice a=" + seen["a"] + ",b=" + seen["b"] + ",c=" + seen["c"], "bob c=" + cFresh, "carol d=" + st["d"].PlanDigest}
	if !slices.Equal(approvals, want) || !slices.Equal(changed, []string{seen["c"] + " -> " + cFresh}) {
		t.Fatalf("audit: approvals %q\nplan changes %q", approvals, changed)
	}
}

// With approval required, a deprovision plans each destroy first (plan-
// destroy jobs, issue 29: it awaited approval of an empty plan), the
// approval binds their digests, and each destroy job carries its step's.
func TestEngineDeprovisionPlansDestroys(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 4})
	if wf := r.drive(r.queue(Provision, 1, false)); wf.State != store.WorkflowSucceeded {
		t.Fatalf("provision %s (%s)", wf.State, wf.Error)
	}
	id := r.queue(Deprovision, 1, true)
	if wf := r.drive(id); wf.State != store.WorkflowAwaitingApproval {
		t.Fatalf("%s, want awaiting approval", wf.State)
	}
	if got := r.agentRound(id); !slices.Equal(got, []string{"a:plan-destroy", "b:plan-destroy", "c:plan-destroy", "d:plan-destroy"}) {
		t.Fatalf("plans %v, want a plan of each destroy", got)
	}
	must(t, r.e.Advance(t.Context(), id))
	st := r.steps(id)
	seen := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		if st[n].PlanDigest == "" {
			t.Fatalf("step %s has no plan digest", n)
		}
		seen[n] = st[n].PlanDigest
	}
	_, err := r.st.ApproveWorkflow(t.Context(), id, "alice", seen, r.now())
	must(t, err)
	if wf := r.drive(id); wf.State != store.WorkflowSucceeded {
		t.Fatalf("deprovision %s (%s)", wf.State, wf.Error)
	}
	for n, d := range seen {
		if r.applied[n] != d {
			t.Errorf("destroy of %s carried %q, want the approved %q", n, r.applied[n], d)
		}
	}
}

// A plan that fails fails the workflow before anything is applied.
func TestEnginePlanFailureFailsWorkflow(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 4})
	r.fail = func(step string) string {
		if step == "b:plan" {
			return "no credentials"
		}
		return ""
	}
	id := r.queue(Provision, 1, true)
	r.drive(id)
	r.agentRound(id)
	wf := r.drive(id)
	if wf.State != store.WorkflowFailed || !strings.Contains(wf.Error, "plan of b failed: no credentials") {
		t.Fatalf("%s (%s)", wf.State, wf.Error)
	}
	if len(r.applied) != 0 {
		t.Fatalf("applied %v", r.applied)
	}
	// The step whose plan failed shows failed, with why; the others were
	// not run (issue 29: every step showed cancelled).
	st := r.steps(id)
	if st["b"].State != store.StepFailed || !strings.Contains(st["b"].Error, "plan of b failed: no credentials") {
		t.Fatalf("step b %s (%q), want failed with the plan's error", st["b"].State, st["b"].Error)
	}
	if st["a"].State != store.StepCancelled {
		t.Fatalf("step a %s, want cancelled", st["a"].State)
	}
}

// Retrying a workflow whose plan failed plans again.
func TestEngineRetryAfterPlanFailure(t *testing.T) {
	r := newRig(t, diamond(nil), store.InstallSettings{Parallelism: 4})
	failing := true
	r.fail = func(step string) string {
		if step == "a:plan" && failing {
			return "no credentials"
		}
		return ""
	}
	id := r.queue(Provision, 1, true)
	r.drive(id)
	r.agentRound(id)
	if wf := r.drive(id); wf.State != store.WorkflowFailed {
		t.Fatalf("%s, want failed", wf.State)
	}
	failing = false
	_, err := r.st.RetryStep(t.Context(), id, "a", r.now())
	must(t, err)
	wf := r.drive(id)
	if wf.State != store.WorkflowAwaitingApproval {
		t.Fatalf("after the retry %s (%s), want awaiting approval", wf.State, wf.Error)
	}
	if got := r.agentRound(id); !slices.Contains(got, "a:plan") {
		t.Fatalf("the retry did not plan a again: %v", got)
	}
	must(t, r.e.Advance(t.Context(), id))
	if st := r.steps(id)["a"]; st.PlanDigest == "" {
		t.Fatalf("a's new plan is not in: %+v", st)
	}
}

// A step whose rendered config is past a limit every agent enforces (here
// its size, grown by an input the app's config only refers to) fails
// with the limit named, instead of becoming a job no agent takes.
func TestEngineStepPastConfigLimitsFails(t *testing.T) {
	ref := "{{ .inputs.blob }}"
	files := diamond(map[string]string{"components/e.toml": "type = \"action\"\n[config]\nsteps = [{ script = \"echo " + strings.Repeat(ref, 4) + "\" }]\n"})
	files["inputs.toml"] = append(files["inputs.toml"], "\n[[input]]\nname = \"blob\"\ndefault = \"\"\n"...)
	r := newRig(t, files, store.InstallSettings{Parallelism: 4})
	r.install.Inputs = map[string]string{"blob": strings.Repeat("t", 300<<10)}
	_, err := r.st.UpdateInstall(t.Context(), r.install.ID, r.install.Inputs, r.install.Settings, r.now())
	must(t, err)
	wf := r.drive(r.queue(Provision, 1, false))
	st := r.steps(wf.ID)
	if wf.State != store.WorkflowFailed || st["e"].State != store.StepFailed ||
		!strings.Contains(st["e"].Error, "more than 1048576 bytes in its canonical encoding (the limit is 1048576)") {
		t.Fatalf("workflow %s, step e %s: %q; want e failed naming the size limit", wf.State, st["e"].State, st["e"].Error)
	}
	if st["a"].State != store.StepSucceeded {
		t.Errorf("step a %s: a step within the limits did not run", st["a"].State)
	}
}
