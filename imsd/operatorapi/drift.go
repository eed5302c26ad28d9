package operatorapi

import (
	"context"
	"maps"
	"slices"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
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
	for _, d := range deployed {
		runs[d.Name] = true
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
				base := d.TickAt
				if base.IsZero() {
					base = s.now()
				}
				cd.NextCheckTime = tsOrNil(sc.Next(base))
			}
		}
		out.Components = append(out.Components, cd)
	}
	return connect.NewResponse(out), nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
