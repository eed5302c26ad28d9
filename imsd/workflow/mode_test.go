package workflow

import (
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/store"
)

var hookActions = map[string]string{
	"actions/seed.toml": `description = "Seeds the database after provisioning."
[[trigger]]
type = "post_provision"
[[step]]
name = "seed"
script = "true"
`,
	"actions/wipe.toml": `description = "Wipes before teardown."
mode = "maintenance"
[[trigger]]
type = "pre_teardown"
[[step]]
name = "wipe"
script = "true"
`,
}

// Every job names the mode it needs: a provision's components and its
// hooks without a mode of their own need provision; a deprovision's
// components deprovision, and a hook that declares maintenance needs
// maintenance. A job the agent refuses fails its step for good, with the
// agent's words, and ends the workflow failed.
func TestStepModes(t *testing.T) {
	r := newRig(t, diamond(hookActions), store.InstallSettings{Parallelism: 2})
	prov := r.queue(Provision, 1, false)
	if wf := r.drive(prov); wf.State != store.WorkflowSucceeded {
		t.Fatalf("provision %s: %s", wf.State, wf.Error)
	}
	for name, mode := range r.modes {
		if mode != store.ModeProvision {
			t.Errorf("provision step %s: mode %q, want provision", name, mode)
		}
	}
	if _, ok := r.modes["post_provision:seed"]; !ok {
		t.Fatalf("no post-provision hook ran: %v", r.modes)
	}

	r.modes = nil
	r.off = map[store.Mode]bool{store.ModeDeprovision: true}
	dep := r.queue(Deprovision, 1, false)
	wf := r.drive(dep)
	if wf.State != store.WorkflowFailed {
		t.Fatalf("deprovision with deprovision off: %s", wf.State)
	}
	if r.modes["pre_teardown:wipe"] != store.ModeMaintenance {
		t.Errorf("hook wipe: mode %q, want maintenance (declared); all: %v", r.modes["pre_teardown:wipe"], r.modes)
	}
	refused := 0
	for name, st := range r.steps(dep) {
		mode, ran := r.modes[name]
		switch {
		case !ran:
			if st.State != store.StepSkipped {
				t.Errorf("step %s never handed out but %s", name, st.State)
			}
		case mode == store.ModeDeprovision:
			refused++
			if st.State != store.StepFailed || !strings.Contains(st.Error, "refused: deprovision is turned off in the customer's account") {
				t.Errorf("refused step %s: %s %q", name, st.State, st.Error)
			}
			j, err := r.st.GetJob(t.Context(), st.JobID)
			must(t, err)
			if j.State != store.JobRefused || j.Attempt != 1 {
				t.Errorf("refused step %s: job %s at attempt %d", name, j.State, j.Attempt)
			}
		}
	}
	if refused == 0 {
		t.Fatalf("no deprovision step was handed out: %v", r.modes)
	}
}
