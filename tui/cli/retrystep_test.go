package cli

import (
	"slices"
	"strings"
	"testing"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc workflow retry WF without STEP retries the only failed step, and
// otherwise lists the failed steps to name one (issue 29: it said
// "missing STEP").
func TestWorkflowRetryWithoutStep(t *testing.T) {
	f, _ := setup(t)
	step := func(name string, st imsv1.StepState, err string) *imsv1.WorkflowStep {
		return &imsv1.WorkflowStep{Name: name, State: st, Error: err}
	}
	f.workflow = &imsv1.Workflow{Id: "wf_1", Steps: []*imsv1.WorkflowStep{
		step("db", imsv1.StepState_STEP_STATE_SUCCEEDED, ""),
		step("kv", imsv1.StepState_STEP_STATE_FAILED, "plan of kv failed: checksum mismatch"),
		step("api", imsv1.StepState_STEP_STATE_SKIPPED, "not run: kv failed"),
	}}
	r := mustRun(t, "workflow", "retry", "wf_1")
	if !strings.Contains(r.stdout, "Step kv is the workflow's only failed step.") || !slices.Equal(f.retried, []string{"wf_1/kv"}) {
		t.Fatalf("retry: %q, retried %v", r.stdout, f.retried)
	}
	f.workflow.Steps = append(f.workflow.Steps, step("web", imsv1.StepState_STEP_STATE_FAILED, "boom\nmore"))
	r = byoc(t, "workflow", "retry", "wf_1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "workflow wf_1 has 2 failed steps; name the one to retry: byoc workflow retry wf_1 STEP") ||
		!strings.Contains(r.stderr, "kv (plan of kv failed: checksum mismatch)") || !strings.Contains(r.stderr, "web (boom)") || len(f.retried) != 1 {
		t.Fatalf("two failed: exit %d, %q, retried %v", r.code, r.stderr, f.retried)
	}
	mustRun(t, "workflow", "retry", "wf_1", "web")
	if !slices.Equal(f.retried, []string{"wf_1/kv", "wf_1/web"}) {
		t.Fatalf("retried %v", f.retried)
	}
}
