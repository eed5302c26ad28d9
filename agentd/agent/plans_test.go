package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// planner plans to write the text of STATE_DIR/desired, saving it as its
// plan artifact, and applies the artifact it is handed (or the desired
// text when it has none), writing what it applied into STATE_DIR/applied.
type planner struct{}

func (planner) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "planner", Version: "1"}, nil
}
func (planner) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}
func (planner) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	want, err := os.ReadFile(filepath.Join(req.Job.StateDir, "desired"))
	if err != nil {
		return nil, err
	}
	if req.Job.PlanDir == "" || req.Env["BYOC_PLAN_DIR"] != req.Job.PlanDir {
		return nil, errors.New("no plan dir, or not in the environment")
	}
	if err := os.WriteFile(filepath.Join(req.Job.PlanDir, "plan.txt"), want, 0o600); err != nil {
		return nil, err
	}
	return &sdk.PlanResponse{PlannedChanges: []sdk.PlannedChange{{Address: "file.applied", Action: sdk.ActionUpdate,
		After: map[string]any{"text": string(want)}, Summary: "write " + strings.TrimSpace(string(want))}}}, nil
}
func (planner) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	src := filepath.Join(req.Job.StateDir, "desired")
	if req.Job.PlanDir != "" {
		src = filepath.Join(req.Job.PlanDir, "plan.txt")
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	rec := string(b) + "digest=" + req.Job.ApprovedPlanDigest + " env=" + req.Env["BYOC_APPROVED_PLAN_DIGEST"] + " from=" + filepath.Base(src)
	return &sdk.ApplyResponse{}, os.WriteFile(filepath.Join(req.Job.StateDir, "applied"), []byte(rec), 0o600)
}

// An approved apply plans again and applies the saved artifact of the
// approved plan only when the fresh plan has the approved digest; when it
// differs, nothing is applied and the job fails with the fresh plan.
func TestApprovedPlanIsReplanned(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stateRoot := t.TempDir()
	r := &agent.PluginRunner{Loader: &pluginhost.Loader{SelfExe: self, Builtins: []string{"planner"}},
		WorkRoot: t.TempDir(), StateRoot: stateRoot}
	t.Cleanup(func() { r.Close() })
	state := filepath.Join(stateRoot, "files")
	plans := filepath.Join(state, sdk.PlanDirName)
	run := func(id, op, approved string) (agent.Outcome, string) {
		t.Helper()
		var l logs
		out := r.Run(t.Context(), agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: "planner", Component: "files",
			Operation: op, Config: map[string]any{}, Timeout: time.Minute, ApprovedPlanDigest: approved},
			func(stream int32, text string) { l.add(stream, text) })
		return out, l.String()
	}
	// The state dir exists once a job of the component ran.
	if out, _ := run("job0", sdk.OpPlan, ""); out.Outcome != agentv1.Outcome_OUTCOME_FAILED {
		t.Fatalf("a plan without the desired file: %v", out)
	}
	os.WriteFile(filepath.Join(state, "desired"), []byte("v1\n"), 0o600)

	plan, log := run("job1", sdk.OpPlan, "")
	if plan.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || !strings.HasPrefix(plan.PlanDigest, "sha256:") || len(plan.PlannedChanges) != 1 {
		t.Fatalf("plan: %v %s\n%s", plan.Outcome, plan.Error, log)
	}
	if again, err := agent.PlanDigest(plan.PlannedChanges); err != nil || again != plan.PlanDigest {
		t.Fatalf("the digest is not the changes' digest: %s vs %s (%v)", again, plan.PlanDigest, err)
	}
	artifact := filepath.Join(plans, strings.TrimPrefix(plan.PlanDigest, "sha256:"), "plan.txt")
	if b, err := os.ReadFile(artifact); err != nil || string(b) != "v1\n" {
		t.Fatalf("the plan's artifact %s: %q %v", artifact, b, err)
	}
	if !strings.Contains(log, "[agentd] plan "+plan.PlanDigest+" saved in ") {
		t.Errorf("plan log:\n%s", log)
	}
	apply, log := run("job2", sdk.OpApply, plan.PlanDigest)
	if apply.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || apply.PlanDigest != plan.PlanDigest {
		t.Fatalf("approved apply: %v %s\n%s", apply.Outcome, apply.Error, log)
	}
	got, _ := os.ReadFile(filepath.Join(state, "applied"))
	if want := "v1\ndigest=" + plan.PlanDigest + " env=" + plan.PlanDigest + " from=plan.txt"; string(got) != want {
		t.Fatalf("applied %q, want %q", got, want)
	}
	if !strings.Contains(log, "planning again before applying") || !strings.Contains(log, "the plan is the approved one") {
		t.Errorf("apply log:\n%s", log)
	}
	if _, err := os.Stat(plans); !os.IsNotExist(err) {
		t.Errorf("saved plans outlive the apply: %v", err)
	}

	// Approved v1, but the desired text is now v2: nothing is applied.
	os.WriteFile(filepath.Join(state, "applied"), nil, 0o600)
	os.WriteFile(filepath.Join(state, "desired"), []byte("v2\n"), 0o600)
	changed, log := run("job3", sdk.OpApply, plan.PlanDigest)
	if changed.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(changed.Error, "plan changed since approval: approved "+plan.PlanDigest) ||
		changed.PlanDigest == "" || changed.PlanDigest == plan.PlanDigest || len(changed.PlannedChanges) != 1 ||
		changed.PlannedChanges[0].Summary != "write v2" {
		t.Fatalf("changed plan: %v %q %s %v\n%s", changed.Outcome, changed.Error, changed.PlanDigest, changed.PlannedChanges, log)
	}
	if got, _ := os.ReadFile(filepath.Join(state, "applied")); len(got) != 0 {
		t.Fatalf("a changed plan was applied: %q", got)
	}
	// The fresh plan is kept, so approving it applies its artifact.
	if _, err := os.Stat(filepath.Join(plans, strings.TrimPrefix(changed.PlanDigest, "sha256:"), "plan.txt")); err != nil {
		t.Fatalf("the fresh plan's artifact: %v", err)
	}
	if out, _ := run("job4", sdk.OpApply, changed.PlanDigest); out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("apply of the new plan: %v %s", out.Outcome, out.Error)
	}
	if got, _ := os.ReadFile(filepath.Join(state, "applied")); !strings.HasPrefix(string(got), "v2\n") {
		t.Fatalf("applied %q", got)
	}

	for _, tc := range []struct{ op, digest, want string }{
		{sdk.OpApply, "sha256:nothex", "approved plan digest"},
		{sdk.OpDrift, plan.PlanDigest, "only an apply or a destroy can"},
	} {
		if out, _ := run("job5", tc.op, tc.digest); out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, tc.want) {
			t.Errorf("%s with %q: %v %q, want an error with %q", tc.op, tc.digest, out.Outcome, out.Error, tc.want)
		}
	}
}

// destroyer is a planner that plans its destroys (sdk.DestroyPlanner):
// it deletes STATE_DIR/applied, planning that from what the file holds.
type destroyer struct{ planner }

func (destroyer) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "destroyer", Version: "1"}, nil
}
func (destroyer) PlanDestroy(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	b, err := os.ReadFile(filepath.Join(req.Job.StateDir, "applied"))
	if err != nil {
		return nil, err
	}
	return &sdk.PlanResponse{PlannedChanges: []sdk.PlannedChange{{Address: "file.applied", Action: sdk.ActionDelete,
		Before: map[string]any{"text": string(b)}, Summary: "delete " + strings.TrimSpace(string(b))}}}, nil
}
func (destroyer) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	return &sdk.DestroyResponse{}, os.WriteFile(filepath.Join(req.Job.StateDir, "destroyed"), []byte(req.Job.ApprovedPlanDigest), 0o600)
}

// remover destroys but does not plan its destroys.
type remover struct{ planner }

func (remover) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "remover", Version: "2"}, nil
}
func (remover) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	return &sdk.DestroyResponse{}, os.WriteFile(filepath.Join(req.Job.StateDir, "destroyed"), []byte(req.Job.ApprovedPlanDigest), 0o600)
}

// A destroy is planned (plan-destroy) and, approved, planned again right
// before Destroy, which runs only when the plan is the approved one
// (issue 29: destroys were not planned). A plugin without the hook gets
// the agent's plan: one change deleting the component.
func TestApprovedDestroyIsReplanned(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stateRoot := t.TempDir()
	r := &agent.PluginRunner{Loader: &pluginhost.Loader{SelfExe: self, Builtins: []string{"destroyer", "remover"}},
		WorkRoot: t.TempDir(), StateRoot: stateRoot}
	t.Cleanup(func() { r.Close() })
	run := func(typ, id, op, approved string) (agent.Outcome, string) {
		t.Helper()
		var l logs
		out := r.Run(t.Context(), agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: typ, Component: typ + "-files",
			Operation: op, Config: map[string]any{}, Timeout: time.Minute, ApprovedPlanDigest: approved, Mode: "deprovision"},
			func(stream int32, text string) { l.add(stream, text) })
		return out, l.String()
	}
	run("destroyer", "job0", sdk.OpPlanDestroy, "") // makes the state dir
	state := filepath.Join(stateRoot, "destroyer-files")
	os.WriteFile(filepath.Join(state, "applied"), []byte("v1\n"), 0o600)
	plan, log := run("destroyer", "job1", sdk.OpPlanDestroy, "")
	if plan.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || len(plan.PlannedChanges) != 1 || plan.PlannedChanges[0].Action != sdk.ActionDelete ||
		plan.PlannedChanges[0].Summary != "delete v1" || !strings.HasPrefix(plan.PlanDigest, "sha256:") {
		t.Fatalf("destroy plan: %v %s %v\n%s", plan.Outcome, plan.Error, plan.PlannedChanges, log)
	}
	// What is there changed since the approval: nothing is destroyed.
	os.WriteFile(filepath.Join(state, "applied"), []byte("v2\n"), 0o600)
	changed, log := run("destroyer", "job2", sdk.OpDestroy, plan.PlanDigest)
	if changed.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(changed.Error, "nothing was destroyed, approve the new plan to destroy it") {
		t.Fatalf("changed destroy plan: %v %q\n%s", changed.Outcome, changed.Error, log)
	}
	if _, err := os.Stat(filepath.Join(state, "destroyed")); err == nil {
		t.Fatal("destroyed despite a changed plan")
	}
	out, log := run("destroyer", "job3", sdk.OpDestroy, changed.PlanDigest)
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || !strings.Contains(log, "planning again before destroying") {
		t.Fatalf("approved destroy: %v %q\n%s", out.Outcome, out.Error, log)
	}
	if b, _ := os.ReadFile(filepath.Join(state, "destroyed")); string(b) != changed.PlanDigest {
		t.Fatalf("Destroy saw approved digest %q, want %q", b, changed.PlanDigest)
	}

	// No hook: the agent plans the component's deletion, the same each time.
	hp, log := run("remover", "job4", sdk.OpPlanDestroy, "")
	if hp.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || len(hp.PlannedChanges) != 1 || hp.PlannedChanges[0].Address != "remover-files" ||
		hp.PlannedChanges[0].Action != sdk.ActionDelete || !strings.Contains(hp.PlannedChanges[0].Summary, "does not list what it removes") {
		t.Fatalf("host destroy plan: %v %q %v\n%s", hp.Outcome, hp.Error, hp.PlannedChanges, log)
	}
	if out, log := run("remover", "job5", sdk.OpDestroy, hp.PlanDigest); out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("approved destroy without the hook: %v %q\n%s", out.Outcome, out.Error, log)
	}
}
