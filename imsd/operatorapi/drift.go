package operatorapi

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/cron"
)

// ListInstallDrift lists the drift state of the components an install
// runs: those with a drift schedule in its applied revision (unchecked
// until a check reports) and those a drift check reported on, by name.
func (s *Service) ListInstallDrift(ctx context.Context, req *connect.Request[imsv1.ListInstallDriftRequest]) (*connect.Response[imsv1.ListInstallDriftResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	rows, err := s.store.ListDrift(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	// Only what the install runs: a component removed since its last
	// check has no drift to speak of.
	deployed, err := s.store.InstallComponents(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	runs := map[string]bool{}
	deployedAt := map[string]time.Time{}
	for _, d := range deployed {
		runs[d.Name] = true
		deployedAt[d.Name] = d.DeployedAt
	}
	// The schedules come from the revision the install runs.
	schedules := map[string]string{}
	if eng, err := s.engine(); err == nil && in.AppRevision > 0 {
		if app, err := eng.App(ctx, in.AppID, in.AppRevision); err == nil {
			for _, c := range app.Components {
				if c.DriftSchedule != "" {
					schedules[c.Name] = c.DriftSchedule
				}
			}
			if app.Sandbox != nil && app.Sandbox.DriftSchedule != "" {
				schedules[app.Sandbox.Name] = app.Sandbox.DriftSchedule
			}
		} else {
			s.log.WarnContext(ctx, "drift: read app revision", "install", in.Name, "revision", in.AppRevision, "err", err)
		}
	}
	byName := map[string]store.Drift{}
	for _, d := range rows {
		if runs[d.Component] {
			byName[d.Component] = d
		}
	}
	for name := range schedules {
		if _, ok := byName[name]; !ok && runs[name] {
			byName[name] = store.Drift{InstallID: in.ID, Component: name}
		}
	}
	out := &imsv1.ListInstallDriftResponse{}
	for _, name := range sortedKeys(byName) {
		d := byName[name]
		cd := &imsv1.ComponentDrift{Component: name, Status: d.Status, JobId: d.JobID, Error: d.Error,
			CheckTime: tsOrNil(d.CheckedAt), Schedule: schedules[name],
			Changes: s.plannedToProto(ctx, store.Job{ID: d.JobID, PlannedChanges: d.Changes})}
		if cd.Status == store.DriftUnchecked {
			cd.Status = "unchecked"
		}
		if spec := schedules[name]; spec != "" {
			if sc, err := cron.Parse(spec); err == nil {
				// As the scheduler counts (schedule.DriftPass): from the
				// last tick fired, else from the deploy; a tick due and
				// not fired yet is the next check, fired by its next pass.
				cd.NextCheckTime = tsOrNil(nextDriftCheck(sc, d.TickAt, deployedAt[name], s.now()))
			}
		}
		out.Components = append(out.Components, cd)
	}
	return connect.NewResponse(out), nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// CheckInstallDrift queues a drift check now for each named component the
// install runs (every deployed one when none is named), beside the
// schedules; the checks' results become the components' drift state.
func (s *Service) CheckInstallDrift(ctx context.Context, req *connect.Request[imsv1.CheckInstallDriftRequest]) (*connect.Response[imsv1.CheckInstallDriftResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	eng, err := s.engine()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	deployed, err := s.store.InstallComponents(ctx, in.ID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if len(deployed) == 0 {
		return nil, s.err(ctx, errs.E(errs.Conflict, "install %s runs no component yet: nothing to check for drift", in.Name))
	}
	app, err := eng.App(ctx, in.AppID, in.AppRevision)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	comps := map[string]*config.Component{}
	for _, c := range app.Components {
		comps[c.Name] = c
	}
	if app.Sandbox != nil {
		comps[app.Sandbox.Name] = app.Sandbox
	}
	byName := map[string]store.InstallComponent{}
	for _, d := range deployed {
		byName[d.Name] = d
	}
	names := req.Msg.Components
	if len(names) == 0 {
		names = sortedKeys(byName)
	}
	var jobs []store.Job
	now := s.now()
	for _, n := range names {
		ic, ok := byName[n]
		if !ok {
			return nil, s.err(ctx, errs.Field("components", "install %s runs no component %q (it runs: %s)", in.Name, n, strings.Join(sortedKeys(byName), ", ")))
		}
		c := comps[n]
		if c == nil {
			c = &config.Component{Name: n, Type: ic.ComponentType}
		}
		j, err := eng.DriftJob(ctx, in, app, c, ic, now)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		j.CreatedBy = callerFrom(ctx).Name
		jobs = append(jobs, j)
	}
	queued, err := s.enqueue(ctx, jobs, true, nil)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.CheckInstallDriftResponse{}
	for _, j := range queued {
		out.Jobs = append(out.Jobs, jobFields(j))
	}
	return connect.NewResponse(out), nil
}

// nextDriftCheck is the tick of a component's next drift check, counted
// as the scheduler counts (schedule.DriftPass): after the last tick fired
// (tickAt), else after the deploy. A tick due but not fired yet is the
// next check: the scheduler's next pass fires it. Counting from now
// instead showed the tick after it (a tick off) until the first check.
func nextDriftCheck(sc cron.Schedule, tickAt, deployedAt, now time.Time) time.Time {
	base := tickAt
	if base.IsZero() {
		base = deployedAt
	}
	if base.IsZero() {
		base = now
	}
	return sc.Next(base)
}

// ImportComponent queues the import job of a component the install does
// not run yet (workflow.Engine.ImportJob); once it succeeds the store
// records the component as deployed and audits it.
func (s *Service) ImportComponent(ctx context.Context, req *connect.Request[imsv1.ImportComponentRequest]) (*connect.Response[imsv1.ImportComponentResponse], error) {
	m := req.Msg
	switch {
	case m.Install == "":
		return nil, s.err(ctx, errs.Field("install", "is required"))
	case m.Component == "":
		return nil, s.err(ctx, errs.Field("component", "is required"))
	case strings.TrimSpace(m.ImportId) == "":
		return nil, s.err(ctx, errs.Field("import_id", "is required: it names the existing resource, in the form the component's type defines"))
	case len(m.ImportId) > 4096:
		return nil, s.err(ctx, errs.Field("import_id", "is %d bytes; at most 4096 are allowed", len(m.ImportId)))
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	eng, err := s.engine()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	j, imp, err := eng.ImportJob(ctx, in, m.Component, m.ImportId, callerFrom(ctx).Name)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if err := s.store.EnqueueImport(ctx, j, imp); err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.Wake(j.InstallID)
	return connect.NewResponse(&imsv1.ImportComponentResponse{Job: jobFields(j)}), nil
}
