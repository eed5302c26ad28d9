package workflow

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

var checkAction = map[string]string{
	"actions/check.toml": `description = "Checks the install."
mode = "maintenance"
health_check = true
env = { SIZE = "{{ .inputs.size }}", X = "{{ .components.b.outputs.x }}" }
[[trigger]]
type = "cron"
schedule = "*/5 * * * *"
[[step]]
name = "probe"
script = "echo $SIZE $X"
`,
}

// An action run is a one-step workflow of kind action: it waits for the
// install's running workflow, renders its env from inputs and component
// outputs when it starts, records its job's outputs, and, for a
// health-check action, sets the install's health.
func TestEngineActionRun(t *testing.T) {
	r := newRig(t, diamond(checkAction), store.InstallSettings{Parallelism: 2})
	ctx := t.Context()
	prov := r.queue(Provision, 1, false)
	must(t, r.e.Advance(ctx, prov)) // running: a's job queued

	in := r.installState()
	a, rev, err := r.e.InstallAction(ctx, in, "check")
	must(t, err)
	if rev != 1 || a.Mode != "maintenance" {
		t.Fatalf("action %+v at revision %d", a, rev)
	}
	_, _, err = r.e.InstallAction(ctx, in, "chekc")
	if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), `did you mean "check"?`) || !strings.Contains(err.Error(), "its actions: check") {
		t.Fatalf("unknown action: %v", err)
	}
	run := NewActionRun(in, rev, a, TriggerManual, "by hand", "tok", r.now())
	must(t, r.st.CreateWorkflow(ctx, run))
	// One workflow at a time: the run waits for the provision.
	must(t, r.e.Advance(ctx, run.ID))
	if wf, _, _ := r.st.GetWorkflow(ctx, run.ID); wf.State != store.WorkflowQueued {
		t.Fatalf("action run %s while the provision runs, want queued", wf.State)
	}
	if wf := r.drive(prov); wf.State != store.WorkflowSucceeded {
		t.Fatalf("provision %s: %s", wf.State, wf.Error)
	}

	wf := r.drive(run.ID)
	if wf.State != store.WorkflowSucceeded || wf.Kind != Action || wf.Action != "check" || wf.Trigger != TriggerManual || wf.Mode != "maintenance" {
		t.Fatalf("run %+v", wf)
	}
	steps := r.steps(run.ID)
	st, ok := steps["check"]
	if len(steps) != 1 || !ok || st.Action != "check" || st.ComponentType != ActionType {
		t.Fatalf("steps %+v", steps)
	}
	j, err := r.st.GetJob(ctx, st.JobID)
	must(t, err)
	var cfg struct {
		Env map[string]string `json:"env"`
	}
	must(t, json.Unmarshal(j.Config, &cfg))
	if cfg.Env["SIZE"] != "1" || cfg.Env["X"] != "1" {
		t.Fatalf("job env %v, want SIZE=1 (input) and X=1 (b's output)", cfg.Env)
	}
	runs, err := r.st.ListActionRuns(ctx, store.ActionRunFilter{InstallID: in.ID})
	must(t, err)
	if len(runs) != 1 || runs[0].Outputs["x"] != "1" {
		t.Fatalf("runs %+v", runs)
	}
	if h := r.installState().Health; h.State != store.HealthHealthy || h.WorkflowID != run.ID || h.At.IsZero() {
		t.Fatalf("health after a passing check: %+v", h)
	}

	// A failing check makes the install unhealthy, with the step's error.
	r.fail = func(string) string { return "probe: exit status 3" }
	run2 := NewActionRun(r.installState(), rev, a, TriggerCron, "cron", "cron", r.now())
	must(t, r.st.CreateWorkflow(ctx, run2))
	if wf := r.drive(run2.ID); wf.State != store.WorkflowFailed {
		t.Fatalf("failing run %s", wf.State)
	}
	in = r.installState()
	if in.Health.State != store.HealthUnhealthy || in.Health.Error != "probe: exit status 3" || in.Health.WorkflowID != run2.ID {
		t.Fatalf("health after a failing check: %+v", in.Health)
	}
	if in.State != store.InstallActive {
		t.Fatalf("an action run moved the install to %s", in.State)
	}
}
