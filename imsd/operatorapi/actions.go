package operatorapi

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/access"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
)

func (s *Service) engine() (*workflow.Engine, error) {
	if s.cfg.Engine == nil {
		return nil, errors.New("no workflow engine")
	}
	return s.cfg.Engine, nil
}

// installApp is the app revision install (name or id) runs, and its
// number: what ListActions and ListDebugCommands list from.
func (s *Service) installApp(ctx context.Context, install string) (*config.App, int64, error) {
	if install == "" {
		return nil, 0, errs.Field("install", "is required")
	}
	e, err := s.engine()
	if err != nil {
		return nil, 0, err
	}
	in, err := s.store.GetInstall(ctx, install)
	if err != nil {
		return nil, 0, err
	}
	return e.InstallRevision(ctx, in)
}

// ListActions lists the actions of an install's app revision.
func (s *Service) ListActions(ctx context.Context, req *connect.Request[imsv1.ListActionsRequest]) (*connect.Response[imsv1.ListActionsResponse], error) {
	app, rev, err := s.installApp(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListActionsResponse{AppRevision: rev}
	for _, a := range app.Actions {
		p := &imsv1.Action{Name: a.Name, Description: a.Description, Mode: a.PermissionMode(), HealthCheck: a.HealthCheck, Network: a.Network,
			TimeoutSeconds: int64(workflow.ActionTimeout(a) / time.Second)}
		for _, t := range a.Triggers {
			p.Triggers = append(p.Triggers, &imsv1.ActionTrigger{Type: t.Type, Schedule: t.Schedule, Component: t.Component})
		}
		for _, st := range a.Steps {
			p.Steps = append(p.Steps, st.Name)
		}
		out.Actions = append(out.Actions, p)
	}
	return connect.NewResponse(out), nil
}

// StartActionRun queues a run of one action.
func (s *Service) StartActionRun(ctx context.Context, req *connect.Request[imsv1.StartActionRunRequest]) (*connect.Response[imsv1.StartActionRunResponse], error) {
	m := req.Msg
	switch {
	case m.Install == "":
		return nil, s.err(ctx, errs.Field("install", "is required"))
	case m.Action == "":
		return nil, s.err(ctx, errs.Field("action", "is required"))
	case m.Trigger != "" && m.Trigger != workflow.TriggerManual:
		return nil, s.err(ctx, errs.Field("trigger", "must be manual (or empty); imsd starts cron and hook runs itself"))
	case len(m.Reason) > 1024:
		return nil, s.err(ctx, errs.Field("reason", "is longer than 1024 bytes"))
	}
	e, err := s.engine()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if in.State == store.InstallDeprovisioned {
		return nil, s.err(ctx, errs.E(errs.Conflict, "install %s is deprovisioned: there is nothing to run actions in", in.Name))
	}
	a, rev, err := e.InstallAction(ctx, in, m.Action)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if a.PermissionMode() != string(store.ModeBreakGlass) {
		// Debug (a support role) runs break_glass actions only; any
		// other action is a change and needs deploy.
		if err := s.require(ctx, "run action "+a.Name+" (mode "+a.PermissionMode()+", not a break_glass debug action) on", access.Deploy, in.Name); err != nil {
			return nil, s.err(ctx, err)
		}
	}
	by := callerFrom(ctx).Name
	reason := cmp.Or(m.Reason, "action "+a.Name+" run by "+by)
	wf := workflow.NewActionRun(in, rev, a, workflow.TriggerManual, reason, by, s.now())
	if err := s.store.CreateWorkflow(ctx, wf); err != nil {
		return nil, s.err(ctx, err)
	}
	s.kick(wf.ID)
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "action run queued", "workflow", wf.ID, "install", in.Name, "action", a.Name, "mode", a.PermissionMode(), "revision", rev, "by", by)
	return connect.NewResponse(&imsv1.StartActionRunResponse{Run: actionRunToProto(store.ActionRun{Workflow: wf}, in.Name)}), nil
}

// ListActionRuns lists an install's action runs, newest first.
func (s *Service) ListActionRuns(ctx context.Context, req *connect.Request[imsv1.ListActionRunsRequest]) (*connect.Response[imsv1.ListActionRunsResponse], error) {
	m := req.Msg
	if m.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	if m.PageSize < 0 || m.PageSize > 1000 {
		return nil, s.err(ctx, errs.Field("page_size", "must be between 0 and 1000"))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	runs, err := s.store.ListActionRuns(ctx, store.ActionRunFilter{InstallID: in.ID, Action: m.Action, Limit: int(m.PageSize)})
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListActionRunsResponse{}
	for _, r := range runs {
		out.Runs = append(out.Runs, actionRunToProto(r, in.Name))
	}
	return connect.NewResponse(out), nil
}

// GetActionRun returns one action run with its outputs.
func (s *Service) GetActionRun(ctx context.Context, req *connect.Request[imsv1.GetActionRunRequest]) (*connect.Response[imsv1.GetActionRunResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	wf, steps, err := s.store.GetWorkflow(ctx, req.Msg.Id)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if wf.Kind != workflow.Action {
		return nil, s.err(ctx, errs.Field("id", "workflow %s is a %s, not an action run (byoc workflow get %s)", wf.ID, wf.Kind, wf.ID))
	}
	r := store.ActionRun{Workflow: wf}
	if len(steps) > 0 && steps[0].JobID != "" {
		r.JobID = steps[0].JobID
		j, err := s.store.GetJob(ctx, r.JobID)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		r.Outputs = j.Outputs
	}
	name := ""
	if in, err := s.store.GetInstall(ctx, wf.InstallID); err == nil {
		name = in.Name
	}
	return connect.NewResponse(&imsv1.GetActionRunResponse{Run: actionRunToProto(r, name)}), nil
}

func actionRunToProto(r store.ActionRun, installName string) *imsv1.ActionRun {
	wf := r.Workflow
	return &imsv1.ActionRun{Id: wf.ID, InstallId: wf.InstallID, InstallName: installName, Action: wf.Action, Trigger: wf.Trigger,
		Mode: wf.Mode, Reason: wf.Reason, State: workflowStatesToProto[wf.State], AppRevision: wf.AppRevision, Error: wf.Error,
		CreateTime: ts(wf.CreatedAt), CreatedBy: wf.CreatedBy, StartTime: ts(wf.StartedAt), EndTime: ts(wf.EndedAt),
		JobId: r.JobID, Outputs: r.Outputs}
}

func healthToProto(h store.InstallHealth) *imsv1.InstallHealth {
	if h.State == store.HealthUnknown {
		return nil
	}
	return &imsv1.InstallHealth{State: string(h.State), CheckTime: ts(h.At), Error: h.Error, WorkflowId: h.WorkflowID}
}

// installsDir is where an app's files keep installs' input values.
const installsDir = "installs/"

// GetInstallStack returns the install's app revision files, but for
// installs/*.toml, and imsd's signing key id, for `byoc install stack`.
func (s *Service) GetInstallStack(ctx context.Context, req *connect.Request[imsv1.GetInstallStackRequest]) (*connect.Response[imsv1.GetInstallStackResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	e, err := s.engine()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	app, rev, err := e.InstallRevision(ctx, in)
	if errs.Is(err, errs.Conflict) {
		// An app with no revision yet: a stack with no inputs, secrets
		// or policies (the CLI builds it from the app's name).
		a, err := s.store.GetApp(ctx, in.AppID)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		return connect.NewResponse(&imsv1.GetInstallStackResponse{Install: in.Name, App: a.Name, SigningKeyId: s.cfg.SigningKeyID}), nil
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.GetInstallStackResponse{Install: in.Name, App: app.Metadata.Name, AppRevision: rev, SigningKeyId: s.cfg.SigningKeyID}
	for _, p := range slices.Sorted(maps.Keys(app.Files)) {
		if strings.HasPrefix(p, installsDir) {
			// installs/*.toml hold the vendor's input values, sensitive
			// ones in plain text, for every install: the stack is built
			// without them (the customer supplies the inputs it takes),
			// so no role gets them here.
			continue
		}
		out.Files = append(out.Files, &imsv1.AppFile{Path: p, Content: app.Files[p]})
	}
	return connect.NewResponse(out), nil
}
