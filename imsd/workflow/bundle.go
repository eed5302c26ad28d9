package workflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// BundleStep is one step of an offline bundle's workflow, its job's
// config rendered as imsd would render it when the step starts, except
// for references to outputs of components the same workflow deploys:
// those the agent renders (Renderer.Deferred).
type BundleStep struct {
	Step   store.Step
	Mode   store.Mode
	Config []byte
}

// BundlePlan plans the workflow an offline bundle carries for install in
// at revision rev (0: the app's latest): a provision while the install
// runs nothing, else an update from what imsd last knew it ran. It
// returns the workflow's kind, its revision and its steps in an order
// that respects their needs.
func (e *Engine) BundlePlan(ctx context.Context, in store.Install, rev int64) (string, int64, []BundleStep, error) {
	deployed, err := e.st.InstallComponents(ctx, in.ID)
	if err != nil {
		return "", 0, nil, err
	}
	kind := Provision
	if len(deployed) > 0 {
		kind = Update
	}
	plan, err := e.plan(ctx, kind, "", in, rev, nil)
	if err != nil {
		return "", 0, nil, err
	}
	app, err := e.app(ctx, in.AppID, plan.Revision)
	if err != nil {
		return "", 0, nil, err
	}
	sc := &stepContext{in: in, outputs: map[string]map[string]string{}, app: app, deferred: map[string]bool{}}
	if err := json.Unmarshal(plan.Inputs, &sc.inputs); err != nil {
		return "", 0, nil, fmt.Errorf("bundle inputs: %w", err)
	}
	for _, d := range deployed {
		sc.outputs[d.Name] = d.Outputs
	}
	for _, s := range plan.Steps {
		if s.Component != "" {
			sc.deferred[s.Component] = true
		}
	}
	if sc.schemas, err = e.schemas(ctx); err != nil {
		return "", 0, nil, err
	}
	for _, n := range app.SensitiveInputs() {
		if v, ok := sc.inputs[n]; ok {
			if s := config.InputText(v); s != "" {
				sc.sensitive = append(sc.sensitive, s)
			}
		}
	}
	wf := store.Workflow{Kind: kind, InstallID: in.ID, AppRevision: plan.Revision}
	out := make([]BundleStep, 0, len(plan.Steps))
	for i := range plan.Steps {
		s := &plan.Steps[i]
		cfg, err := jobConfig(sc, s)
		if err != nil {
			return "", 0, nil, fmt.Errorf("step %s: render: %w", s.Name, err)
		}
		out = append(out, BundleStep{Step: *s, Mode: StepMode(wf, s, app), Config: cfg})
	}
	return kind, plan.Revision, out, nil
}

// BundleDeployed is the install component a succeeded deploy of an
// offline bundle's step leaves, as Engine.finish records an online one.
func (e *Engine) BundleDeployed(ctx context.Context, wf store.Workflow, s store.Step, j store.Job) (store.InstallComponent, error) {
	return e.deployed(ctx, wf, &s, j)
}
