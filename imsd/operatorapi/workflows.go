package operatorapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/stack"
)

var kindsFromProto = map[imsv1.WorkflowKind]string{
	imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION:   workflow.Provision,
	imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE:      workflow.Update,
	imsv1.WorkflowKind_WORKFLOW_KIND_DEPROVISION: workflow.Deprovision,
	imsv1.WorkflowKind_WORKFLOW_KIND_ACTION:      "action",
}

var kindsToProto = invert(kindsFromProto)

var workflowStatesToProto = map[store.WorkflowState]imsv1.WorkflowState{
	store.WorkflowQueued:           imsv1.WorkflowState_WORKFLOW_STATE_QUEUED,
	store.WorkflowAwaitingApproval: imsv1.WorkflowState_WORKFLOW_STATE_AWAITING_APPROVAL,
	store.WorkflowRunning:          imsv1.WorkflowState_WORKFLOW_STATE_RUNNING,
	store.WorkflowSucceeded:        imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED,
	store.WorkflowFailed:           imsv1.WorkflowState_WORKFLOW_STATE_FAILED,
	store.WorkflowCancelled:        imsv1.WorkflowState_WORKFLOW_STATE_CANCELLED,
}

var stepStatesToProto = map[store.StepState]imsv1.StepState{
	store.StepPending:   imsv1.StepState_STEP_STATE_PENDING,
	store.StepRunning:   imsv1.StepState_STEP_STATE_RUNNING,
	store.StepSucceeded: imsv1.StepState_STEP_STATE_SUCCEEDED,
	store.StepFailed:    imsv1.StepState_STEP_STATE_FAILED,
	store.StepSkipped:   imsv1.StepState_STEP_STATE_SKIPPED,
	store.StepCancelled: imsv1.StepState_STEP_STATE_CANCELLED,
}

func invert[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// lifecycleKind reads a workflow kind a caller may start.
func lifecycleKind(field string, k imsv1.WorkflowKind, def string) (string, error) {
	if k == imsv1.WorkflowKind_WORKFLOW_KIND_UNSPECIFIED && def != "" {
		return def, nil
	}
	kind, ok := kindsFromProto[k]
	if !ok || kind == "action" {
		return "", errs.Field(field, "must be provision, update or deprovision (an action runs with StartActionRun: byoc action run INSTALL ACTION)")
	}
	return kind, nil
}

// latestRevision returns the number of the app's newest revision.
func (s *Service) latestRevision(ctx context.Context, appID, installName string) (int64, error) {
	revs, err := s.store.ListAppRevisions(ctx, appID)
	if err != nil {
		return 0, err
	}
	if len(revs) == 0 {
		return 0, errs.E(errs.Conflict, "the app of install %s has no revision yet (byoc app push DIR creates one)", installName)
	}
	return revs[0].Number, nil
}

// queueWorkflow queues a lifecycle workflow of kind for install in at
// revision rev (0: the latest), with the install's parallelism and approval
// settings, and wakes the engine. app, when set, is revision rev parsed.
func (s *Service) queueWorkflow(ctx context.Context, in store.Install, kind string, rev int64, reason string, app *config.App) (store.Workflow, error) {
	switch {
	case kind == workflow.Update && (in.State == store.InstallNew || in.State == store.InstallDeprovisioned):
		return store.Workflow{}, errs.E(errs.Conflict, "install %s is %s: provision it first (byoc install provision %s)", in.Name, in.State, in.Name)
	case kind == workflow.Deprovision && (in.State == store.InstallNew || in.State == store.InstallDeprovisioned):
		return store.Workflow{}, errs.E(errs.Conflict, "install %s is %s: there is nothing to deprovision", in.Name, in.State)
	}
	if rev == 0 {
		var err error
		if rev, err = s.latestRevision(ctx, in.AppID, in.Name); err != nil {
			return store.Workflow{}, err
		}
	}
	if app == nil {
		r, err := s.store.GetAppRevision(ctx, in.AppID, rev)
		if errs.Is(err, errs.NotFound) {
			return store.Workflow{}, errs.Field("app_revision", "the app of install %s has no revision %d (byoc app revisions lists them)", in.Name, rev)
		}
		if err != nil {
			return store.Workflow{}, err
		}
		if app, err = load.Parse(r.Files, storedOptions()); err != nil {
			return store.Workflow{}, fmt.Errorf("revision %d: %w", rev, err)
		}
	}
	wf := store.Workflow{ID: auth.NewID("wf_"), InstallID: in.ID, Kind: kind, AppRevision: rev, Reason: reason,
		Parallelism:     cmp.Or(in.Settings.Parallelism, app.Metadata.InstallDefaults.Parallelism, workflow.DefaultParallelism),
		RequireApproval: app.Metadata.InstallDefaults.RequireApproval,
		CreatedAt:       s.now(), CreatedBy: callerFrom(ctx).Name}
	if in.Settings.RequireApproval != nil {
		wf.RequireApproval = *in.Settings.RequireApproval
	}
	if err := s.store.CreateWorkflow(ctx, wf); err != nil {
		return store.Workflow{}, err
	}
	s.log.InfoContext(ctx, "workflow queued", "workflow", wf.ID, "install", in.Name, "kind", kind, "revision", rev, "by", wf.CreatedBy)
	if s.cfg.Engine != nil {
		s.cfg.Engine.Kick(wf.ID)
	}
	return wf, nil
}

// StartWorkflow queues a lifecycle workflow for an install.
func (s *Service) StartWorkflow(ctx context.Context, req *connect.Request[imsv1.StartWorkflowRequest]) (*connect.Response[imsv1.StartWorkflowResponse], error) {
	m := req.Msg
	if m.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	kind, err := lifecycleKind("kind", m.Kind, "")
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if m.AppRevision < 0 {
		return nil, s.err(ctx, errs.Field("app_revision", "must be a revision number, or 0 for the latest"))
	}
	if len(m.Reason) > 1024 {
		return nil, s.err(ctx, errs.Field("reason", "is longer than 1024 bytes"))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	reason := m.Reason
	if reason == "" {
		reason = kind + " by " + callerFrom(ctx).Name
	}
	wf, err := s.queueWorkflow(ctx, in, kind, m.AppRevision, reason, nil)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.StartWorkflowResponse{Workflow: s.workflowToProto(ctx, wf, nil)}), nil
}

// ListWorkflows lists workflows, newest first.
func (s *Service) ListWorkflows(ctx context.Context, req *connect.Request[imsv1.ListWorkflowsRequest]) (*connect.Response[imsv1.ListWorkflowsResponse], error) {
	m := req.Msg
	if m.PageSize < 0 || m.PageSize > 1000 {
		return nil, s.err(ctx, errs.Field("page_size", "must be between 0 and 1000"))
	}
	f := store.WorkflowFilter{Active: m.Active, Limit: int(m.PageSize)}
	if m.Install != "" {
		in, err := s.store.GetInstall(ctx, m.Install)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		f.InstallID = in.ID
	}
	selected, err := s.selectedInstalls(ctx, "selector", m.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	v, err := s.readView(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	f.InstallIDs = v.restrict(selected)
	wfs, err := s.store.ListWorkflows(ctx, f)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListWorkflowsResponse{}
	for _, wf := range wfs {
		if !v.visible(wf.InstallID) {
			continue
		}
		out.Workflows = append(out.Workflows, s.workflowToProto(ctx, wf, nil))
	}
	return connect.NewResponse(out), nil
}

// GetWorkflow returns a workflow with its steps.
func (s *Service) GetWorkflow(ctx context.Context, req *connect.Request[imsv1.GetWorkflowRequest]) (*connect.Response[imsv1.GetWorkflowResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	wf, steps, err := s.store.GetWorkflow(ctx, req.Msg.Id)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetWorkflowResponse{Workflow: s.workflowToProto(ctx, wf, steps)}), nil
}

// ApproveWorkflow lets a workflow awaiting approval run.
func (s *Service) ApproveWorkflow(ctx context.Context, req *connect.Request[imsv1.ApproveWorkflowRequest]) (*connect.Response[imsv1.ApproveWorkflowResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	for name, d := range req.Msg.PlanDigests {
		if _, ok := agentproto.PlanDigestHex(d); !ok {
			return nil, s.err(ctx, errs.Field("plan_digests["+name+"]", "%q is not a plan digest (sha256: and 64 lowercase hex digits)", d))
		}
	}
	var expected map[string]string
	if len(req.Msg.PlanDigests) > 0 {
		expected = req.Msg.PlanDigests
	}
	wf, err := s.store.ApproveWorkflow(ctx, req.Msg.Id, callerFrom(ctx).Name, expected, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.kick(wf.ID)
	s.log.InfoContext(ctx, "workflow approved", "workflow", wf.ID, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.ApproveWorkflowResponse{Workflow: s.workflowToProto(ctx, wf, nil)}), nil
}

// CancelWorkflow cancels a workflow.
func (s *Service) CancelWorkflow(ctx context.Context, req *connect.Request[imsv1.CancelWorkflowRequest]) (*connect.Response[imsv1.CancelWorkflowResponse], error) {
	m := req.Msg
	if m.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	if len(m.Reason) > 1024 {
		return nil, s.err(ctx, errs.Field("reason", "is longer than 1024 bytes"))
	}
	reason := cmp.Or(m.Reason, "by "+callerFrom(ctx).Name)
	wf, err := s.store.RequestWorkflowCancel(ctx, m.Id, reason, callerFrom(ctx).Name, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if wf.State.Terminal() {
		s.cancelPlanJobs(ctx, wf.ID, reason)
	}
	s.kick(wf.ID)
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "workflow cancel requested", "workflow", wf.ID, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.CancelWorkflowResponse{Workflow: s.workflowToProto(ctx, wf, nil)}), nil
}

// cancelPlanJobs cancels the plan jobs still running of a workflow that
// ended while it awaited approval: nobody will look at those plans. It
// only logs what it cannot do; the jobs change nothing anyway.
func (s *Service) cancelPlanJobs(ctx context.Context, id, reason string) {
	_, steps, err := s.store.GetWorkflow(ctx, id)
	if err != nil {
		s.log.WarnContext(ctx, "cancel plan jobs", "workflow", id, "err", err)
		return
	}
	for _, st := range steps {
		if st.PlanJobID == "" || st.PlanDigest != "" {
			continue
		}
		j, err := s.store.RequestCancel(ctx, st.PlanJobID, "workflow "+id+" cancelled: "+reason, callerFrom(ctx).Name, s.now())
		if err != nil {
			if !errs.Is(err, errs.Conflict) { // already ended
				s.log.WarnContext(ctx, "cancel plan job", "workflow", id, "job", st.PlanJobID, "err", err)
			}
			continue
		}
		if !j.State.Terminal() && j.AgentID != "" {
			s.hub.Cancel(j.AgentID, dispatch.CancelRequest{JobID: j.ID, Reason: "workflow " + id + " cancelled"})
		}
		s.hub.NotifyLog(j.ID)
	}
}

// RetryWorkflowStep runs a failed step again.
func (s *Service) RetryWorkflowStep(ctx context.Context, req *connect.Request[imsv1.RetryWorkflowStepRequest]) (*connect.Response[imsv1.RetryWorkflowStepResponse], error) {
	m := req.Msg
	switch {
	case m.Id == "":
		return nil, s.err(ctx, errs.Field("id", "is required"))
	case m.Step == "":
		return nil, s.err(ctx, errs.Field("step", "is required"))
	}
	wf, err := s.store.RetryStep(ctx, m.Id, m.Step, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.kick(wf.ID)
	s.log.InfoContext(ctx, "workflow step retried", "workflow", wf.ID, "step", m.Step, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.RetryWorkflowStepResponse{Workflow: s.workflowToProto(ctx, wf, nil)}), nil
}

func (s *Service) kick(id string) {
	if s.cfg.Engine != nil {
		s.cfg.Engine.Kick(id)
	}
}

// changedInputs returns the install's inputs with set and unset applied.
func changedInputs(have map[string]string, set map[string]string, unset []string) (map[string]string, error) {
	if err := checkInputs("set_inputs", set); err != nil {
		return nil, err
	}
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	for i, k := range unset {
		if _, ok := set[k]; ok {
			return nil, errs.Field(fmt.Sprintf("unset_inputs[%d]", i), "%q is also in set_inputs", k)
		}
		delete(out, k)
	}
	maps.Copy(out, set)
	return out, nil
}

// checkAgainstApp checks install inputs against the app's latest revision,
// when it has one.
func (s *Service) checkAgainstApp(ctx context.Context, in store.Install, inputs, set map[string]string) error {
	revs, err := s.store.ListAppRevisions(ctx, in.AppID)
	if err != nil || len(revs) == 0 {
		return err
	}
	r, err := s.store.GetAppRevision(ctx, in.AppID, revs[0].Number)
	if err != nil {
		return err
	}
	app, err := load.Parse(r.Files, storedOptions())
	if err != nil {
		return err
	}
	// The customer sets their inputs in the install stack, which only the
	// agent reads; a value set here would never be used.
	for _, name := range slices.Sorted(maps.Keys(set)) {
		for _, i := range app.Inputs.Inputs {
			if i.Name == name && i.ProvidedBy == "customer" {
				return errs.Field("set_inputs", "input %q is provided by the customer: they set it in the install stack (parameter %s), and the agent reports it (byoc install get)",
					name, stack.InputParameter(name))
			}
		}
	}
	if _, problems := app.ResolveInputs(inputs); len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
		}
		return errs.Field("set_inputs", "%s (app revision %d)", strings.Join(msgs, "; "), revs[0].Number)
	}
	return nil
}

// UpdateInstall changes an install's inputs and settings.
func (s *Service) UpdateInstall(ctx context.Context, req *connect.Request[imsv1.UpdateInstallRequest]) (*connect.Response[imsv1.UpdateInstallResponse], error) {
	m := req.Msg
	if m.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	inputs, err := changedInputs(in.Inputs, m.SetInputs, m.UnsetInputs)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	settings := in.Settings
	if m.Parallelism != nil {
		if *m.Parallelism < 0 || *m.Parallelism > 64 {
			return nil, s.err(ctx, errs.Field("parallelism", "must be between 1 and 64, or 0 for the app's default"))
		}
		settings.Parallelism = int(*m.Parallelism)
	}
	if m.RequireApproval != nil {
		settings.RequireApproval = m.RequireApproval
	}
	if err := s.checkAgainstApp(ctx, in, inputs, m.SetInputs); err != nil {
		return nil, s.err(ctx, err)
	}
	in, err = s.store.UpdateInstall(ctx, in.ID, inputs, settings, s.now())
	if err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.FleetChanged()
	out := &imsv1.UpdateInstallResponse{Install: s.installToProto(ctx, in)}
	if m.Deploy {
		changed := append(slices.Sorted(maps.Keys(m.SetInputs)), m.UnsetInputs...)
		reason := "install settings changed"
		if len(changed) > 0 {
			reason = "inputs changed: " + strings.Join(changed, ", ")
		}
		wf, err := s.queueWorkflow(ctx, in, workflow.Update, 0, reason, nil)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		out.Workflow = s.workflowToProto(ctx, wf, nil)
	}
	return connect.NewResponse(out), nil
}

// PlanInstall says what a workflow would do now.
func (s *Service) PlanInstall(ctx context.Context, req *connect.Request[imsv1.PlanInstallRequest]) (*connect.Response[imsv1.PlanInstallResponse], error) {
	m := req.Msg
	if m.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	kind, err := lifecycleKind("kind", m.Kind, workflow.Update)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if m.Live {
		// A live plan runs plugins in the customer's account: not for a
		// read-only role, though a graph-only plan is.
		if err := s.require(ctx, "run a live plan (plan jobs on the agent) of", access.Deploy, m.Install); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	if m.AppRevision < 0 {
		return nil, s.err(ctx, errs.Field("app_revision", "must be a revision number, or 0 for the latest"))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	var inputs map[string]string
	if len(m.SetInputs) > 0 || len(m.UnsetInputs) > 0 {
		if inputs, err = changedInputs(in.Inputs, m.SetInputs, m.UnsetInputs); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	if s.cfg.Engine == nil {
		return nil, s.err(ctx, errors.New("no workflow engine"))
	}
	plan, err := s.cfg.Engine.PlanFor(ctx, kind, in, m.AppRevision, inputs)
	var pe *workflow.PlanError
	if errors.As(err, &pe) {
		return nil, s.err(ctx, errs.E(errs.Invalid, "install %s cannot be planned: %s", in.Name, pe))
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.PlanInstallResponse{Kind: kindsToProto[kind], AppRevision: plan.Revision, Unchanged: plan.Unchanged}
	for _, st := range plan.Steps {
		out.Steps = append(out.Steps, stepToProto(st))
	}
	if m.Live {
		if err := s.livePlan(ctx, kind, in, plan, time.Duration(m.TimeoutSeconds)*time.Second, out.Steps); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	out.Inputs, err = s.maskedInputs(ctx, in.AppID, plan)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(out), nil
}

// DefaultLivePlanTimeout is how long a live plan waits for its plan jobs.
const DefaultLivePlanTimeout = 2 * time.Minute

// livePlan asks the install's agent for real plans: a plan job per
// component apply step, enqueued through the normal dispatch and waited
// for up to timeout (the jobs' own time limit too; those still running
// then are cancelled). Each step gets its plan job, state and digest.
func (s *Service) livePlan(ctx context.Context, kind string, in store.Install, plan *workflow.Plan, timeout time.Duration, steps []*imsv1.WorkflowStep) error {
	switch {
	case timeout < 0 || timeout > time.Hour:
		return errs.Field("timeout_seconds", "must be between 1 and 3600, or 0 for %d", int(DefaultLivePlanTimeout/time.Second))
	case timeout == 0:
		timeout = DefaultLivePlanTimeout
	}
	live, err := s.cfg.Engine.PlanJobs(ctx, kind, in, plan, "live plan by "+callerFrom(ctx).Name)
	if err != nil {
		return err
	}
	if len(live.Jobs) > 0 {
		// No agent, no plan: say so now rather than at the timeout.
		agents, err := s.store.AgentsForInstall(ctx, in.ID)
		if err != nil {
			return err
		}
		if len(agents) == 0 {
			return errs.E(errs.Conflict, "install %s has no agent enrolled, so nothing can plan it live (byoc install plan %s without --live plans from the graph)", in.Name, in.Name)
		}
		// An agent that is offline would not plan before the timeout
		// either: say so now, and enqueue nothing.
		if err := s.offlineAgents(in, agents); err != nil {
			return err
		}
	}
	var jobs []store.Job
	for _, st := range plan.Steps {
		if j, ok := live.Jobs[st.Name]; ok {
			j.Timeout = min(j.Timeout, timeout)
			jobs = append(jobs, j)
		}
	}
	if len(jobs) > 0 {
		if _, err := s.enqueue(ctx, jobs, true, nil); err != nil {
			return err
		}
	}
	s.log.InfoContext(ctx, "live plan", "install", in.Name, "jobs", len(jobs), "by", callerFrom(ctx).Name)
	ended := map[string]store.Job{}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(ended) < len(jobs) {
		signal := s.hub.FleetSignal()
		for _, j := range jobs {
			if _, ok := ended[j.ID]; ok {
				continue
			}
			got, err := s.store.GetJob(ctx, j.ID)
			if err != nil {
				return err
			}
			if got.State.Terminal() {
				ended[j.ID] = got
			}
		}
		if len(ended) == len(jobs) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-signal:
		case <-time.After(time.Second): // other replicas' agents
		case <-deadline.C:
			for _, j := range jobs {
				if _, ok := ended[j.ID]; ok {
					continue
				}
				jc, err := s.store.RequestCancel(ctx, j.ID, "live plan timed out", "imsd", s.now())
				if err == nil && !jc.State.Terminal() && jc.AgentID != "" {
					s.hub.Cancel(jc.AgentID, dispatch.CancelRequest{JobID: jc.ID, Reason: "live plan timed out"})
				}
				ended[j.ID] = store.Job{ID: j.ID, State: store.JobTimedOut,
					Error: fmt.Sprintf("no plan within %s (is the install's agent connected?)", timeout)}
			}
		}
	}
	for _, p := range steps {
		if why, ok := live.Unplanned[p.Name]; ok {
			p.PlanState, p.PlanError = "not_planned", why
			continue
		}
		j, ok := live.Jobs[p.Name]
		if !ok {
			continue
		}
		p.PlanJobId = j.ID
		got := ended[j.ID]
		switch {
		case got.State == store.JobSucceeded:
			p.PlanState = "planned"
			if p.PlanDigest, err = workflow.JobPlanDigest(got); err != nil {
				return err
			}
		case got.State == store.JobTimedOut:
			p.PlanState, p.PlanError = "timed_out", got.Error
		default:
			p.PlanState, p.PlanError = "failed", cmp.Or(got.Error, "plan job "+string(got.State))
		}
	}
	return nil
}

// offlineAgents is an error naming the install's agents and since when
// they are offline when none of them is connected (online), else
// nil.
func (s *Service) offlineAgents(in store.Install, agents []store.Agent) error {
	now := s.now()
	var why []string
	for _, a := range agents {
		if s.online(a, now) {
			return nil
		}
		if a.LastSeenAt.IsZero() {
			why = append(why, fmt.Sprintf("agent %s of install %s has never connected (enrolled %s)", a.ID, in.Name, a.EnrolledAt.UTC().Format(time.RFC3339)))
		} else {
			why = append(why, fmt.Sprintf("agent %s of install %s is offline since %s (%s ago)", a.ID, in.Name,
				a.LastSeenAt.UTC().Format(time.RFC3339), now.Sub(a.LastSeenAt).Round(time.Second)))
		}
	}
	return errs.E(errs.Conflict, "%s, so nothing can plan it live: start the agent, or plan from the graph (byoc install plan %s without --live)", strings.Join(why, "; "), in.Name)
}

// maskedInputs are a plan's inputs with the sensitive ones masked.
func (s *Service) maskedInputs(ctx context.Context, appID string, plan *workflow.Plan) (*structpb.Struct, error) {
	var vals map[string]any
	if err := json.Unmarshal(plan.Inputs, &vals); err != nil {
		return nil, err
	}
	r, err := s.store.GetAppRevision(ctx, appID, plan.Revision)
	if err != nil {
		return nil, err
	}
	app, err := load.Parse(r.Files, storedOptions())
	if err != nil {
		return nil, err
	}
	for _, n := range app.SensitiveInputs() {
		if _, ok := vals[n]; ok {
			vals[n] = "(sensitive)"
		}
	}
	return structpb.NewStruct(vals)
}

func stepToProto(st store.Step) *imsv1.WorkflowStep {
	return &imsv1.WorkflowStep{Name: st.Name, Component: st.Component, Action: st.Action, ComponentType: st.ComponentType,
		Operation: st.Operation, Needs: st.Needs, Reason: st.Reason, State: stepStatesToProto[st.State], JobId: st.JobID,
		Attempts: int32(st.Attempts), Error: st.Error, StartTime: ts(st.StartedAt), EndTime: ts(st.EndedAt),
		TimeoutSeconds: int64(st.Timeout / time.Second), PlanJobId: st.PlanJobID, PlanDigest: st.PlanDigest,
		ApprovedPlanDigest: st.ApprovedPlanDigest}
}

// stepPlanState fills in where a step's plan is: planned once its digest
// is in, else planning while its plan job runs, failed (with why) after.
func (s *Service) stepPlanState(ctx context.Context, p *imsv1.WorkflowStep) {
	switch {
	case p.PlanJobId == "":
		return
	case p.PlanDigest != "":
		p.PlanState = "planned"
		return
	}
	p.PlanState = "planning"
	j, err := s.store.GetJob(ctx, p.PlanJobId)
	if err != nil || !j.State.Terminal() {
		return
	}
	if j.State == store.JobSucceeded {
		return // recorded at the engine's next pass
	}
	p.PlanState, p.PlanError = "failed", cmp.Or(j.Error, "plan job "+string(j.State))
	if j.State == store.JobTimedOut {
		p.PlanState = "timed_out"
	}
}

func (s *Service) workflowToProto(ctx context.Context, wf store.Workflow, steps []store.Step) *imsv1.Workflow {
	p := &imsv1.Workflow{Id: wf.ID, InstallId: wf.InstallID, Kind: kindsToProto[wf.Kind], State: workflowStatesToProto[wf.State],
		AppRevision: wf.AppRevision, Reason: wf.Reason, Parallelism: int32(wf.Parallelism), RequireApproval: wf.RequireApproval,
		CancelRequested: wf.CancelRequested, ApprovedBy: wf.ApprovedBy, ApproveTime: ts(wf.ApprovedAt), Error: wf.Error,
		CreateTime: ts(wf.CreatedAt), CreatedBy: wf.CreatedBy, StartTime: ts(wf.StartedAt), EndTime: ts(wf.EndedAt), ReleaseId: wf.ReleaseID}
	if in, err := s.store.GetInstall(ctx, wf.InstallID); err == nil {
		p.InstallName = in.Name
	}
	if steps != nil {
		p.StepCounts = map[string]int32{}
		for _, st := range steps {
			sp := stepToProto(st)
			s.stepPlanState(ctx, sp)
			p.Steps = append(p.Steps, sp)
			p.StepCounts[string(st.State)]++
		}
	}
	return p
}

func settingsToProto(st store.InstallSettings) *imsv1.InstallSettings {
	p := &imsv1.InstallSettings{Parallelism: int32(st.Parallelism), RequireApproval: st.RequireApproval, Source: st.Source,
		Windows: st.Windows}
	for name, o := range st.Overrides {
		// An override stored before the job config limits (one an
		// installs/*.toml of an older imsd set) may be nested deeper than
		// clients decode: it is shown as the error, and the install with
		// it, rather than failing every list of installs.
		v, err := structpb.NewStruct(o)
		if err == nil {
			err = agentproto.CheckConfig(o)
		}
		if err != nil {
			v = &structpb.Struct{Fields: map[string]*structpb.Value{
				"error": structpb.NewStringValue("imsd cannot show this override: " + strings.ToValidUTF8(err.Error(), "\uFFFD"))}}
		}
		if p.Overrides == nil {
			p.Overrides = map[string]*structpb.Struct{}
		}
		p.Overrides[name] = v
	}
	return p
}
