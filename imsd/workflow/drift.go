package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// OpDrift is the operation of a drift check job.
const OpDrift = "drift"

// DriftMode is the permission mode of a drift check: it changes nothing,
// but it reads the customer's infrastructure as a day-2 job does.
const DriftMode = store.ModeMaintenance

// DriftJob builds the drift check of component c as install in runs it
// (ic, what the install last applied): the applied config, with the
// secrets it refers to listed for the agent and the values of sensitive
// inputs (those the deploy rendered it with) listed for redaction, as a
// destroy would carry them. It is not a workflow step: a drift check runs
// beside workflows (the agent's component lock keeps it from running
// while an apply of the same component does) and changes nothing imsd
// keeps but the component's drift state.
func (e *Engine) DriftJob(ctx context.Context, in store.Install, app *config.App, c *config.Component, ic store.InstallComponent, now time.Time) (store.Job, error) {
	var cfg map[string]any
	if err := json.Unmarshal(ic.Config, &cfg); err != nil {
		return store.Job{}, fmt.Errorf("component %s config: %w", ic.Name, err)
	}
	secrets := secretNames(cfg)
	if own, ok := cfg[SecretsKey].([]any); ok {
		for _, v := range own {
			if n, ok := v.(string); ok {
				secrets = append(secrets, n)
			}
		}
	}
	if secrets = slices.Compact(slices.Sorted(slices.Values(secrets))); len(secrets) > 0 {
		cfg[SecretsKey] = secrets
	}
	if ic.WorkflowID != "" {
		if wf, _, err := e.st.GetWorkflow(ctx, ic.WorkflowID); err == nil {
			var inputs map[string]any
			if json.Unmarshal(wf.Inputs, &inputs) == nil {
				var sensitive []string
				for _, n := range app.SensitiveInputs() {
					if s := config.InputText(inputs[n]); s != "" {
						sensitive = append(sensitive, s)
					}
				}
				if len(sensitive) > 0 {
					cfg[SensitiveKey] = sensitive
				}
			}
		} else {
			return store.Job{}, fmt.Errorf("component %s: the workflow that deployed it: %w", ic.Name, err)
		}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return store.Job{}, err
	}
	return store.Job{ID: auth.NewSortableID("job_", now), InstallID: in.ID, ComponentType: ic.ComponentType, Operation: OpDrift,
		Component: ic.Name, Config: b, MaxAttempts: 1, Timeout: timeoutOr(c.Timeout, defaultComponentTimeout),
		CreatedAt: now, CreatedBy: "drift schedule", Mode: DriftMode}, nil
}
