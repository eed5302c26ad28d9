package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
)

// ImportMode is the permission mode of an import job: like a drift
// check, it changes nothing but reads the customer's infrastructure, as a
// day-2 job does.
const ImportMode = store.ModeMaintenance

// ImportJob builds the import job of component name of install in
// (byoc component import): the component's config rendered as a
// provision would render it now, with the import id in the reserved key
// jobconfig.ImportIDKey for the agent, in ImportMode; and what the job makes the install's component once it succeeds
// (the config and digest an apply of it would record). The component
// must be in the install's app revision and not deployed.
func (e *Engine) ImportJob(ctx context.Context, in store.Install, name, importID, createdBy string) (store.Job, store.ComponentImport, error) {
	var none store.ComponentImport
	app, rev, err := e.InstallRevision(ctx, in)
	if err != nil {
		return store.Job{}, none, err
	}
	c := app.Component(name)
	if c == nil {
		var names []string
		for _, c := range app.Components {
			names = append(names, c.Name)
		}
		return store.Job{}, none, errs.Field("component", "app revision %d of install %s has no component %q (its components: %s)", rev, in.Name, name, strings.Join(names, ", "))
	}
	deployed, err := e.st.InstallComponents(ctx, in.ID)
	if err != nil {
		return store.Job{}, none, err
	}
	for _, d := range deployed {
		if d.Name == name {
			return store.Job{}, none, errs.E(errs.Conflict, "install %s already runs component %s (deployed by job %s): an import adopts a resource for a component not deployed yet", in.Name, name, d.JobID)
		}
	}
	plan, err := e.PlanFor(ctx, Provision, in, rev, nil)
	if err != nil {
		return store.Job{}, none, err
	}
	var step *store.Step
	for i := range plan.Steps {
		if plan.Steps[i].Component == name && plan.Steps[i].Operation == OpApply {
			step = &plan.Steps[i]
		}
	}
	if step == nil {
		return store.Job{}, none, fmt.Errorf("component %s: the provision plan has no step for it", name)
	}
	wf := store.Workflow{InstallID: in.ID, Kind: Provision, AppRevision: plan.Revision, Inputs: plan.Inputs}
	sc, err := e.stepContext(ctx, wf)
	if err != nil {
		return store.Job{}, none, err
	}
	cfg, err := jobConfig(sc, step)
	if err != nil {
		return store.Job{}, none, errs.E(errs.Conflict, "component %s: its config cannot be rendered before what it needs is deployed: %v", name, err)
	}
	now := e.now()
	j := store.Job{ID: auth.NewSortableID("job_", now), InstallID: in.ID, ComponentType: step.ComponentType, Operation: store.OpImport,
		Component: name, MaxAttempts: 1, Timeout: step.Timeout, CreatedAt: now, CreatedBy: createdBy, Mode: ImportMode,
		State: store.JobQueued}
	// The config recorded once the import succeeds is the config without
	// the import id, as an apply's.
	j.Config = cfg
	canon, digest, err := deployedConfig(step, j)
	if err != nil {
		return store.Job{}, none, err
	}
	var m map[string]any
	if err := json.Unmarshal(cfg, &m); err != nil {
		return store.Job{}, none, err
	}
	m[jobconfig.ImportIDKey] = importID
	if j.Config, err = json.Marshal(m); err != nil {
		return store.Job{}, none, err
	}
	imp := store.ComponentImport{JobID: j.ID, InstallID: in.ID, Name: name, ComponentType: step.ComponentType, Digest: digest,
		Config: canon, Needs: app.Graph().Deps(name), AppRevision: plan.Revision, ImportID: importID, CreatedAt: now}
	return j, imp, nil
}
