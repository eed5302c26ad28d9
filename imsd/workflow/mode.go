package workflow

import (
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// KindMode is the permission mode the component steps of a workflow of
// kind need: provision for a provision, deprovision for a deprovision,
// maintenance for an update (and anything else).
func KindMode(kind string) store.Mode {
	switch kind {
	case Provision:
		return store.ModeProvision
	case Deprovision:
		return store.ModeDeprovision
	}
	return store.ModeMaintenance
}

// StepMode is the permission mode the job of step s of workflow wf needs:
// an action run's, the mode its action declares (wf.Mode); a hook's, the
// mode its action declares, else the workflow's; a component's, the
// workflow's (KindMode). app is the workflow's app revision, for hooks.
func StepMode(wf store.Workflow, s *store.Step, app *config.App) store.Mode {
	if wf.Kind == Action && wf.Mode != "" {
		return store.Mode(wf.Mode)
	}
	if s.Action != "" && app != nil {
		if a := app.Action(s.Action); a != nil && a.Mode != "" {
			return store.Mode(a.Mode)
		}
	}
	return KindMode(wf.Kind)
}
