package operatorapi

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/release"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

var releaseStatesToProto = map[store.ReleaseState]imsv1.ReleaseState{
	store.ReleaseRunning:          imsv1.ReleaseState_RELEASE_STATE_RUNNING,
	store.ReleaseAwaitingApproval: imsv1.ReleaseState_RELEASE_STATE_AWAITING_APPROVAL,
	store.ReleasePaused:           imsv1.ReleaseState_RELEASE_STATE_PAUSED,
	store.ReleaseHalted:           imsv1.ReleaseState_RELEASE_STATE_HALTED,
	store.ReleaseSucceeded:        imsv1.ReleaseState_RELEASE_STATE_SUCCEEDED,
	store.ReleaseFailed:           imsv1.ReleaseState_RELEASE_STATE_FAILED,
	store.ReleaseCancelled:        imsv1.ReleaseState_RELEASE_STATE_CANCELLED,
}

func (s *Service) releases() (*release.Engine, error) {
	if s.cfg.Releases == nil {
		return nil, errs.E(errs.Unavailable, "this imsd runs no release engine")
	}
	return s.cfg.Releases, nil
}

// CreateRelease plans the selected installs of an app and rolls a
// revision out to them in waves.
func (s *Service) CreateRelease(ctx context.Context, req *connect.Request[imsv1.CreateReleaseRequest]) (*connect.Response[imsv1.CreateReleaseResponse], error) {
	m := req.Msg
	eng, err := s.releases()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if m.AgentRelease != "" {
		return s.createAgentRollout(ctx, eng, m)
	}
	switch {
	case m.App == "":
		return nil, s.err(ctx, errs.Field("app", "is required"))
	case m.Canary != 0 || m.GroupBy != "" || m.ConfirmWithinSeconds != 0:
		return nil, s.err(ctx, errs.Field("agent_release", "canary, group_by and confirm_within_seconds are for agent rollouts, which name an agent_release"))
	case m.AppRevision < 1:
		return nil, s.err(ctx, errs.Field("app_revision", "is required (byoc app revisions lists them)"))
	case m.PauseBetweenSeconds < 0:
		return nil, s.err(ctx, errs.Field("pause_between_seconds", "must not be negative"))
	case len(m.Waves) > 512:
		return nil, s.err(ctx, errs.Field("waves", "is longer than 512 bytes"))
	case len(m.Selector) > 512:
		return nil, s.err(ctx, errs.Field("selector", "is longer than 512 bytes"))
	}
	app, err := s.store.GetApp(ctx, m.App)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	r, err := eng.Create(ctx, release.CreateRequest{AppID: app.ID, Revision: m.AppRevision, Waves: m.Waves, Selector: m.Selector,
		MaxFailures: m.MaxFailures, PauseBetween: time.Duration(m.PauseBetweenSeconds) * time.Second, RespectWindows: m.RespectWindows,
		RequireApproval: m.RequireApproval, Reason: m.Reason, By: callerFrom(ctx).Name})
	if err != nil {
		return nil, s.err(ctx, err)
	}
	p, err := s.releaseProto(ctx, r.ID, false)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateReleaseResponse{Release: p}), nil
}

// createAgentRollout is CreateRelease of an agent release.
func (s *Service) createAgentRollout(ctx context.Context, eng *release.Engine, m *imsv1.CreateReleaseRequest) (*connect.Response[imsv1.CreateReleaseResponse], error) {
	switch {
	case !releaseRef.MatchString(m.AgentRelease):
		return nil, s.err(ctx, errs.Field("agent_release", "%q is not an agent release: want oci://HOST/REPOSITORY@sha256:<64 hex digits> (byoc agent publish prints it)", m.AgentRelease))
	case m.AppRevision != 0:
		return nil, s.err(ctx, errs.Field("app_revision", "an agent rollout rolls out an agent release, not an app revision"))
	case m.PauseBetweenSeconds != 0:
		return nil, s.err(ctx, errs.Field("pause_between_seconds", "is for app releases"))
	case m.ConfirmWithinSeconds < 0:
		return nil, s.err(ctx, errs.Field("confirm_within_seconds", "must not be negative"))
	case len(m.Waves) > 512:
		return nil, s.err(ctx, errs.Field("waves", "is longer than 512 bytes"))
	case len(m.Selector) > 512:
		return nil, s.err(ctx, errs.Field("selector", "is longer than 512 bytes"))
	}
	appID := ""
	if m.App != "" {
		app, err := s.store.GetApp(ctx, m.App)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		appID = app.ID
	}
	r, err := eng.CreateAgentRollout(ctx, release.AgentRolloutRequest{AppID: appID, Release: m.AgentRelease, Selector: m.Selector,
		Waves: m.Waves, Canary: int(m.Canary), GroupBy: m.GroupBy, MaxFailures: m.MaxFailures,
		ConfirmWithin: time.Duration(m.ConfirmWithinSeconds) * time.Second, RespectWindows: m.RespectWindows,
		RequireApproval: m.RequireApproval, Reason: m.Reason, By: callerFrom(ctx).Name})
	if err != nil {
		return nil, s.err(ctx, err)
	}
	p, err := s.releaseProto(ctx, r.ID, false)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateReleaseResponse{Release: p}), nil
}

// ListReleases lists releases, newest first.
func (s *Service) ListReleases(ctx context.Context, req *connect.Request[imsv1.ListReleasesRequest]) (*connect.Response[imsv1.ListReleasesResponse], error) {
	m := req.Msg
	if m.PageSize < 0 || m.PageSize > 1000 {
		return nil, s.err(ctx, errs.Field("page_size", "must be between 0 and 1000"))
	}
	f := store.ReleaseFilter{Active: m.Active, Limit: int(m.PageSize)}
	switch m.Kind {
	case "":
	case "agent", "app":
		agent := m.Kind == "agent"
		f.Agent = &agent
	default:
		return nil, s.err(ctx, errs.Field("kind", "want app or agent, got %q", m.Kind))
	}
	if m.App != "" {
		app, err := s.store.GetApp(ctx, m.App)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		f.AppID = app.ID
	}
	rs, err := s.store.ListReleases(ctx, f)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	counts, err := s.store.CountReleaseInstalls(ctx, ids)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListReleasesResponse{}
	names := map[string]string{}
	for _, r := range rs {
		p := releaseToProto(r, counts[r.ID])
		if _, ok := names[r.AppID]; !ok {
			if a, err := s.store.GetApp(ctx, r.AppID); err == nil {
				names[r.AppID] = a.Name
			}
		}
		p.AppName = names[r.AppID]
		out.Releases = append(out.Releases, p)
	}
	return connect.NewResponse(out), nil
}

// GetRelease returns a release with its installs.
func (s *Service) GetRelease(ctx context.Context, req *connect.Request[imsv1.GetReleaseRequest]) (*connect.Response[imsv1.GetReleaseResponse], error) {
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	p, err := s.releaseProto(ctx, req.Msg.Id, true)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetReleaseResponse{Release: p}), nil
}

// releaseProto reads release id and its installs' counts (and, with
// installs, each install).
func (s *Service) releaseProto(ctx context.Context, id string, installs bool) (*imsv1.Release, error) {
	r, ins, err := s.store.GetRelease(ctx, id)
	if err != nil {
		return nil, err
	}
	counts := store.ReleaseCounts{}
	for _, in := range ins {
		if counts[in.Wave] == nil {
			counts[in.Wave] = map[store.ReleaseInstallState]int{}
		}
		counts[in.Wave][in.State]++
	}
	p := releaseToProto(r, counts)
	if a, err := s.store.GetApp(ctx, r.AppID); err == nil {
		p.AppName = a.Name
	}
	if installs {
		p.Installs = make([]*imsv1.ReleaseInstall, len(ins))
		for i, in := range ins {
			p.Installs[i] = &imsv1.ReleaseInstall{InstallId: in.InstallID, InstallName: in.InstallName, Wave: int32(in.Wave),
				FromRevision: in.FromRevision, ToRevision: in.ToRevision, PlanGroup: int32(in.PlanGroup), State: string(in.State),
				WorkflowId: in.WorkflowID, OfferId: in.OfferID, Error: in.Error, WindowOpenTime: ts(in.WindowOpensAt), StartTime: ts(in.StartedAt),
				EndTime: ts(in.EndedAt)}
		}
	}
	return p, nil
}

func releaseToProto(r store.Release, counts store.ReleaseCounts) *imsv1.Release {
	p := &imsv1.Release{Id: r.ID, AppId: r.AppID, AppRevision: r.AppRevision, Kind: r.Kind, RollbackOf: r.RollbackOf,
		RolledBackBy: r.RolledBackBy, State: releaseStatesToProto[r.State], CurrentWave: int32(r.CurrentWave), Selector: r.Selector,
		MaxFailures: int32(r.MaxFailures), MaxFailuresSpec: r.MaxFailuresSpec, PauseBetweenSeconds: int64(r.PauseBetween / time.Second),
		RespectWindows: r.RespectWindows, RequireApproval: r.RequireApproval, CancelRequested: r.CancelRequested, Reason: r.Reason,
		Error: r.Error, CreateTime: ts(r.CreatedAt), CreatedBy: r.CreatedBy, EndTime: ts(r.EndedAt), Counts: map[string]int32{},
		FailuresAccepted: int32(r.FailuresBase), WaveEndTime: ts(r.WaveEndedAt), AgentRelease: r.AgentRelease,
		ConfirmWithinSeconds: int64(r.ConfirmWithin / time.Second)}
	if r.IsAgentRollout() {
		p.Kind = "agent"
	}
	for i, w := range r.Waves {
		wp := &imsv1.ReleaseWave{Name: w.Name, Spec: w.Spec, Size: int32(w.Size), Counts: map[string]int32{}}
		for st, n := range counts[i] {
			wp.Counts[string(st)] = int32(n)
			p.Counts[string(st)] += int32(n)
		}
		p.Waves = append(p.Waves, wp)
	}
	for _, g := range r.PlanGroups {
		p.PlanGroups = append(p.PlanGroups, &imsv1.ReleasePlanGroup{Steps: g.Steps, Installs: int32(g.Installs), Error: g.Error})
	}
	return p
}

// changeRelease applies an operator's action to a release and wakes the
// engine.
func (s *Service) changeRelease(ctx context.Context, id, reason string, action store.ReleaseAction) (*imsv1.Release, error) {
	if id == "" {
		return nil, errs.Field("id", "is required")
	}
	if len(reason) > 1024 {
		return nil, errs.Field("reason", "is longer than 1024 bytes")
	}
	if _, err := s.store.ChangeRelease(ctx, id, action, callerFrom(ctx).Name, reason, s.now()); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "release "+string(action), "release", id, "by", callerFrom(ctx).Name, "reason", reason)
	s.hub.FleetChanged()
	if action == store.ReleaseCancel {
		// An agent rollout's cancel withdraws offers: the agents'
		// streams tell them (other replicas' within offerPoll).
		s.hub.OfferChanged()
	}
	if s.cfg.Releases != nil {
		s.cfg.Releases.Kick(id)
	}
	return s.releaseProto(ctx, id, false)
}

// ApproveRelease starts the wave a release awaits approval for.
func (s *Service) ApproveRelease(ctx context.Context, req *connect.Request[imsv1.ApproveReleaseRequest]) (*connect.Response[imsv1.ApproveReleaseResponse], error) {
	p, err := s.changeRelease(ctx, req.Msg.Id, req.Msg.Reason, store.ReleaseApprove)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.ApproveReleaseResponse{Release: p}), nil
}

// PauseRelease stops a release from starting more installs.
func (s *Service) PauseRelease(ctx context.Context, req *connect.Request[imsv1.PauseReleaseRequest]) (*connect.Response[imsv1.PauseReleaseResponse], error) {
	p, err := s.changeRelease(ctx, req.Msg.Id, req.Msg.Reason, store.ReleasePause)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.PauseReleaseResponse{Release: p}), nil
}

// ResumeRelease runs a paused or halted release again.
func (s *Service) ResumeRelease(ctx context.Context, req *connect.Request[imsv1.ResumeReleaseRequest]) (*connect.Response[imsv1.ResumeReleaseResponse], error) {
	p, err := s.changeRelease(ctx, req.Msg.Id, req.Msg.Reason, store.ReleaseResume)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.ResumeReleaseResponse{Release: p}), nil
}

// CancelRelease cancels a release.
func (s *Service) CancelRelease(ctx context.Context, req *connect.Request[imsv1.CancelReleaseRequest]) (*connect.Response[imsv1.CancelReleaseResponse], error) {
	p, err := s.changeRelease(ctx, req.Msg.Id, req.Msg.Reason, store.ReleaseCancel)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CancelReleaseResponse{Release: p}), nil
}

// RetryRelease runs a release's failed and cancelled installs again.
func (s *Service) RetryRelease(ctx context.Context, req *connect.Request[imsv1.RetryReleaseRequest]) (*connect.Response[imsv1.RetryReleaseResponse], error) {
	p, err := s.changeRelease(ctx, req.Msg.Id, req.Msg.Reason, store.ReleaseRetry)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.RetryReleaseResponse{Release: p}), nil
}

// RollbackRelease creates the release that undoes a release.
func (s *Service) RollbackRelease(ctx context.Context, req *connect.Request[imsv1.RollbackReleaseRequest]) (*connect.Response[imsv1.RollbackReleaseResponse], error) {
	eng, err := s.releases()
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if req.Msg.Id == "" {
		return nil, s.err(ctx, errs.Field("id", "is required"))
	}
	r, err := eng.Rollback(ctx, req.Msg.Id, req.Msg.Reason, callerFrom(ctx).Name)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	p, err := s.releaseProto(ctx, r.ID, false)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.RollbackReleaseResponse{Release: p}), nil
}
