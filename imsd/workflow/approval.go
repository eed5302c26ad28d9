package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// Approved plans (store/plans.go has the states). While a workflow awaits
// approval the engine plans each component apply step for real, on the
// install's agent: a plan job with the config and mode the apply will
// have. Approval binds the plans' digests; each apply job carries its
// step's (signed), and the agent plans again before applying and applies
// only the same plan. An apply that found another plan fails; planChanged
// then makes that plan the step's and the workflow awaits approval again.

// planSteps advances a workflow awaiting approval: it records the steps
// still running from before (a step whose plan changed sent the workflow
// back here while others ran), starts a plan job for each component apply
// step without one, records the plans that are in, and fails the
// workflow when a plan failed.
func (e *Engine) planSteps(ctx context.Context, wf store.Workflow, steps []store.Step) (again bool, err error) {
	var sc *stepContext
	for i := range steps {
		s := &steps[i]
		switch {
		case s.State == store.StepRunning:
			j, err := e.st.GetJob(ctx, s.JobID)
			if err != nil {
				return false, err
			}
			if j.State.Terminal() {
				if err := e.finish(ctx, wf, s, j); err != nil {
					return false, err
				}
			}
		case s.State != store.StepPending || !s.NeedsPlan() || s.PlanDigest != "":
		case s.PlanJobID == "":
			if sc == nil {
				if sc, err = e.stepContext(ctx, wf); err != nil {
					return false, err
				}
			}
			cfg, err := jobConfig(sc, s)
			if err != nil {
				// It needs what a step before it makes (outputs): it is
				// planned when it is ready to run, and approved again
				// then (run, needsApproval).
				continue
			}
			now := e.now()
			j := store.Job{ID: auth.NewSortableID("job_", now), InstallID: wf.InstallID, ComponentType: s.ComponentType, Operation: PlanOp(s.Operation),
				Component: s.Component, Config: cfg, MaxAttempts: MaxJobAttempts, Timeout: s.Timeout, CreatedAt: now,
				CreatedBy: "workflow " + wf.ID, Mode: StepMode(wf, s, sc.app)}
			ok, err := e.st.StartStepPlan(ctx, wf.ID, s.Name, j, now)
			if err != nil {
				return false, err
			}
			if ok {
				e.hub.Wake(wf.InstallID)
				e.hub.FleetChanged()
			}
		default:
			j, err := e.st.GetJob(ctx, s.PlanJobID)
			if err != nil {
				return false, err
			}
			if !j.State.Terminal() {
				continue
			}
			if j.State != store.JobSucceeded {
				msg := fmt.Sprintf("plan of %s %s: %s", s.Name, strings.ReplaceAll(string(j.State), "_", " "), cmp.Or(j.Error, "job "+j.ID))
				return false, e.failPlan(ctx, wf, s, msg)
			}
			digest, err := JobPlanDigest(j)
			if err != nil {
				return false, e.failPlan(ctx, wf, s, fmt.Sprintf("plan of %s: %v", s.Name, err))
			}
			if _, err := e.st.SetStepPlan(ctx, wf.ID, s.Name, j.ID, digest, e.now()); err != nil {
				return false, err
			}
			e.hub.FleetChanged()
		}
	}
	return false, nil
}

// failPlan fails the step whose plan failed, then the workflow (whose
// other pending steps end cancelled): the step shows failed and why, as
// it would had its apply failed, and byoc workflow retry names it.
func (e *Engine) failPlan(ctx context.Context, wf store.Workflow, s *store.Step, msg string) error {
	if err := e.st.EndSteps(ctx, wf.ID, []string{s.Name}, store.StepFailed, msg, e.now()); err != nil {
		return err
	}
	return e.end(ctx, wf, store.WorkflowFailed, msg)
}

// needsApproval reports whether a ready step may not start before an
// approval: in a workflow that requires approval, a component's apply
// whose plan was not approved (it could not be planned before the steps
// it needs had run, or the approval predates plans).
func needsApproval(wf store.Workflow, s *store.Step) bool {
	return wf.RequireApproval && s.NeedsPlan() && s.ApprovedPlanDigest == ""
}

// planChanged handles an apply whose agent found the plan changed since
// approval: the step takes the fresh plan and the workflow awaits
// approval again. It reports whether that was the case.
func (e *Engine) planChanged(ctx context.Context, wf store.Workflow, s *store.Step, j store.Job) (bool, error) {
	if j.State != store.JobFailed || j.ApprovedPlanDigest == "" || j.PlanDigest == "" || j.PlanDigest == j.ApprovedPlanDigest {
		return false, nil
	}
	ok, err := e.st.ReplanStep(ctx, wf.ID, s.Name, j.ID, j.ApprovedPlanDigest, j.PlanDigest, j.Error, e.now())
	if err != nil || !ok {
		return false, err
	}
	e.log.Info("plan changed since approval; the workflow awaits approval again", "workflow", wf.ID, "step", s.Name,
		"approved", j.ApprovedPlanDigest, "plan", j.PlanDigest)
	s.State = store.StepPending
	e.hub.FleetChanged()
	return true, nil
}

// JobPlanDigest is the digest of the plan job j made: as its agent
// reported it, else (an agent before plan digests) computed from the
// changes stored with it.
func JobPlanDigest(j store.Job) (string, error) {
	if j.PlanDigest != "" {
		return j.PlanDigest, nil
	}
	in := make([]agentproto.PlanChange, len(j.PlannedChanges))
	for i, c := range j.PlannedChanges {
		in[i] = agentproto.PlanChange{Address: c.Address, Action: c.Action, Summary: c.Summary}
		for _, v := range []struct {
			raw json.RawMessage
			out *any
		}{{c.Before, &in[i].Before}, {c.After, &in[i].After}} {
			if len(v.raw) > 0 {
				if err := json.Unmarshal(v.raw, v.out); err != nil {
					return "", fmt.Errorf("job %s plan: %w", j.ID, err)
				}
			}
		}
	}
	return agentproto.PlanDigest(in)
}

// LivePlanJobs are the plan jobs of a live plan (byoc install plan --live),
// one per component apply step of plan that can be rendered now, with the
// config and mode its apply would have; Unplanned says, per step, why it
// could not be planned yet (it needs outputs of a step before it).
type LivePlanJobs struct {
	Jobs      map[string]store.Job
	Unplanned map[string]string
}

// PlanJobs builds the plan jobs of a live plan of kind for install in.
// The caller enqueues them.
func (e *Engine) PlanJobs(ctx context.Context, kind string, in store.Install, plan *Plan, createdBy string) (*LivePlanJobs, error) {
	wf := store.Workflow{InstallID: in.ID, Kind: kind, AppRevision: plan.Revision, Inputs: plan.Inputs}
	out := &LivePlanJobs{Jobs: map[string]store.Job{}, Unplanned: map[string]string{}}
	var sc *stepContext
	for i := range plan.Steps {
		s := &plan.Steps[i]
		if !s.NeedsPlan() {
			continue
		}
		if sc == nil {
			var err error
			if sc, err = e.stepContext(ctx, wf); err != nil {
				return nil, err
			}
		}
		cfg, err := jobConfig(sc, s)
		if err != nil {
			out.Unplanned[s.Name] = fmt.Sprintf("cannot be planned before the steps it needs have run: %v", err)
			continue
		}
		now := e.now()
		out.Jobs[s.Name] = store.Job{ID: auth.NewSortableID("job_", now), InstallID: in.ID, ComponentType: s.ComponentType, Operation: PlanOp(s.Operation),
			Component: s.Component, Config: cfg, MaxAttempts: 1, Timeout: s.Timeout, CreatedAt: now,
			CreatedBy: createdBy, Mode: StepMode(wf, s, sc.app)}
	}
	return out, nil
}

// PlanOp is the operation of the plan job of a step of operation op: the
// plan of a destroy (OpPlanDestroy) for a destroy, else a plan.
func PlanOp(op string) string {
	if op == OpDestroy {
		return OpPlanDestroy
	}
	return OpPlan
}
