package terraform_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/terraform"
)

// TestApprovedPlan saves the plan into the plan dir the agent gives a
// plan job, gets the same digest from a second plan of the same state,
// and applies exactly the saved plan when the apply carries its approval:
// even with a config that would plan something else, what was approved
// is what is applied. A saved plan whose state has moved on is refused.
func TestApprovedPlan(t *testing.T) {
	env, _ := setup(t)
	p := terraform.New()
	state := t.TempDir()
	site := t.TempDir()
	job := func(id, planDir, approved string) sdk.JobContext {
		return sdk.JobContext{JobID: id, InstallID: "i", Attempt: 1, WorkDir: t.TempDir(), StateDir: state, PlanDir: planDir, ApprovedPlanDigest: approved}
	}
	cfg := func(name string) map[string]any {
		return map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": name, "dir": site}}
	}
	log := newLogger(`^$`)
	planDir := filepath.Join(state, sdk.PlanDirName, "approved")
	if err := os.MkdirAll(planDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first, err := p.Plan(t.Context(), &sdk.PlanRequest{Job: job("plan-1", planDir, ""), Config: cfg("approved"), Env: env, Log: log})
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, log.text())
	}
	if _, err := os.Stat(filepath.Join(planDir, terraform.PlanFile)); err != nil {
		t.Fatalf("the plan was not saved into the plan dir: %v", err)
	}
	again, err := p.Plan(t.Context(), &sdk.PlanRequest{Job: job("plan-2", t.TempDir(), ""), Config: cfg("approved"), Env: env, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := sdk.PlanDigest(first.PlannedChanges)
	d2, _ := sdk.PlanDigest(again.PlannedChanges)
	if d1 != d2 {
		t.Fatalf("two plans of the same state differ: %s and %s\n%v\n%v", d1, d2, first.PlannedChanges, again.PlannedChanges)
	}

	resp, err := p.Apply(t.Context(), &sdk.ApplyRequest{Job: job("apply-1", planDir, d1), Config: cfg("not-approved"), Env: env, Log: log})
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, log.text())
	}
	if resp.Outputs["name"] != "approved" {
		t.Errorf("applied name %q: want the approved plan's", resp.Outputs["name"])
	}
	if !strings.Contains(log.text(), "terraform: applying the approved plan "+d1) {
		t.Errorf("the log does not say which plan was applied:\n%s", log.text())
	}
	b, _ := os.ReadFile(filepath.Join(site, "index.html"))
	if string(b) != "hello approved" {
		t.Errorf("file holds %q", b)
	}
	// The state moved on since that plan: Terraform refuses it.
	_, err = p.Apply(t.Context(), &sdk.ApplyRequest{Job: job("apply-2", planDir, d1), Config: cfg("approved"), Env: env, Log: log})
	if err == nil || !strings.Contains(err.Error(), "Saved plan is stale") {
		t.Errorf("apply of a stale saved plan: %v, want Terraform's refusal", err)
	}
}

// TestApprovedDestroyPlan: PlanDestroy saves terraform plan -destroy into
// the plan dir and lists what it removes as deletes; Destroy with the
// approval applies exactly that saved plan (issue 29: destroys were not
// planned).
func TestApprovedDestroyPlan(t *testing.T) {
	env, _ := setup(t)
	p := terraform.New()
	state := t.TempDir()
	site := t.TempDir()
	job := func(id, planDir, approved string) sdk.JobContext {
		return sdk.JobContext{JobID: id, InstallID: "i", Attempt: 1, WorkDir: t.TempDir(), StateDir: state, PlanDir: planDir, ApprovedPlanDigest: approved}
	}
	cfg := map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": "x", "dir": site}}
	log := newLogger(`^$`)
	if _, err := p.Apply(t.Context(), &sdk.ApplyRequest{Job: job("apply", "", ""), Config: cfg, Env: env, Log: log}); err != nil {
		t.Fatalf("apply: %v\n%s", err, log.text())
	}
	planDir := filepath.Join(state, sdk.PlanDirName, "destroy")
	if err := os.MkdirAll(planDir, 0o700); err != nil {
		t.Fatal(err)
	}
	pl, err := p.PlanDestroy(t.Context(), &sdk.PlanRequest{Job: job("plan-destroy", planDir, ""), Config: cfg, Env: env, Log: log})
	if err != nil {
		t.Fatalf("plan destroy: %v\n%s", err, log.text())
	}
	if len(pl.PlannedChanges) == 0 {
		t.Fatal("the destroy plan lists nothing")
	}
	for _, c := range pl.PlannedChanges {
		if c.Action != sdk.ActionDelete {
			t.Errorf("planned %s %s in a destroy", c.Action, c.Address)
		}
	}
	if _, err := os.Stat(filepath.Join(planDir, terraform.PlanFile)); err != nil {
		t.Fatalf("the destroy plan was not saved into the plan dir: %v", err)
	}
	d, _ := sdk.PlanDigest(pl.PlannedChanges)
	if _, err := p.Destroy(t.Context(), &sdk.DestroyRequest{Job: job("destroy", planDir, d), Config: cfg, Env: env, Log: log}); err != nil {
		t.Fatalf("destroy: %v\n%s", err, log.text())
	}
	if !strings.Contains(log.text(), "terraform: applying the approved plan "+d) {
		t.Errorf("the log does not say the approved plan was applied:\n%s", log.text())
	}
	if _, err := os.Stat(filepath.Join(site, "index.html")); !os.IsNotExist(err) {
		t.Errorf("the file is still there after the destroy: %v", err)
	}
}
