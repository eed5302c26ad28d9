package workflow

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// The triggers an action run records.
const (
	TriggerManual = "manual"
	TriggerCron   = "cron"
)

// App returns app revision rev of app appID, parsed (and cached: revisions
// never change).
func (e *Engine) App(ctx context.Context, appID string, rev int64) (*config.App, error) {
	return e.app(ctx, appID, rev)
}

// InstallRevision is the app revision an install's actions come from: the
// one it last applied in full, or the app's latest when it has applied
// none yet.
func (e *Engine) InstallRevision(ctx context.Context, in store.Install) (*config.App, int64, error) {
	rev := in.AppRevision
	if rev == 0 {
		revs, err := e.st.ListAppRevisions(ctx, in.AppID)
		if err != nil {
			return nil, 0, err
		}
		if len(revs) == 0 {
			return nil, 0, errs.E(errs.Conflict, "the app of install %s has no revision yet (byoc app push DIR creates one)", in.Name)
		}
		rev = revs[0].Number
	}
	app, err := e.app(ctx, in.AppID, rev)
	if err != nil {
		return nil, 0, err
	}
	return app, rev, nil
}

// InstallAction finds action name in the install's app revision
// (InstallRevision); an unknown name is an invalid-argument error that
// suggests the closest and lists the actions.
func (e *Engine) InstallAction(ctx context.Context, in store.Install, name string) (*config.Action, int64, error) {
	app, rev, err := e.InstallRevision(ctx, in)
	if err != nil {
		return nil, 0, err
	}
	a := app.Action(name)
	if a == nil {
		return nil, 0, UnknownAction(app, name, rev)
	}
	return a, rev, nil
}

// NewActionRun is the workflow that runs action a of app revision rev in
// install in, created now by by: kind action, one step, never awaiting
// approval (starting the run is the decision), recording its trigger and
// the permission mode the action declares.
func NewActionRun(in store.Install, rev int64, a *config.Action, trigger, reason, by string, now time.Time) store.Workflow {
	return store.Workflow{ID: auth.NewID("wf_"), InstallID: in.ID, Kind: Action, AppRevision: rev, Reason: reason,
		Parallelism: 1, Action: a.Name, Trigger: trigger, Mode: a.PermissionMode(), CreatedAt: now, CreatedBy: by}
}

// health is the install health an ended action run sets: for a
// health-check action, healthy when it succeeded and unhealthy with its
// error when it failed; nil otherwise (and for a cancelled run, which
// says nothing about the install).
func (e *Engine) health(ctx context.Context, wf store.Workflow, state store.WorkflowState, msg string) (*store.InstallHealth, error) {
	if state == store.WorkflowCancelled {
		return nil, nil
	}
	in, err := e.st.GetInstall(ctx, wf.InstallID)
	if err != nil {
		return nil, err
	}
	app, err := e.app(ctx, in.AppID, wf.AppRevision)
	if err != nil {
		return nil, err
	}
	a := app.Action(wf.Action)
	if a == nil || !a.HealthCheck {
		return nil, nil
	}
	h := &store.InstallHealth{State: store.HealthHealthy, At: e.now(), WorkflowID: wf.ID}
	if state != store.WorkflowSucceeded {
		h.State, h.Error = store.HealthUnhealthy, msg
		// The step's own error says more than "steps not succeeded".
		_, steps, err := e.st.GetWorkflow(ctx, wf.ID)
		if err != nil {
			return nil, err
		}
		for _, st := range steps {
			if st.Error != "" {
				h.Error = st.Error
			}
		}
	}
	return h, nil
}

// ActionTimeout is how long a run of action a may take: its timeout, or
// the default of ten minutes.
func ActionTimeout(a *config.Action) time.Duration {
	return timeoutOr(a.Timeout, defaultActionTimeout)
}
