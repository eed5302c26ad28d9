package operatorapi

import (
	"context"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// maxGrant is the longest grant break_glass.toml's max_duration allows.
const maxGrant = 24 * time.Hour

// RequestBreakGlass records an operator's break-glass request, checked
// against the install's app's break_glass.toml. imsd only records it:
// the customer decides on the agent's side, and the agent enforces.
func (s *Service) RequestBreakGlass(ctx context.Context, req *connect.Request[imsv1.RequestBreakGlassRequest]) (*connect.Response[imsv1.RequestBreakGlassResponse], error) {
	m := req.Msg
	switch {
	case m.Install == "":
		return nil, s.err(ctx, errs.Field("install", "is required"))
	case m.DurationSeconds <= 0:
		return nil, s.err(ctx, errs.Field("duration_seconds", "must be positive"))
	case len(m.Reason) > 2000:
		return nil, s.err(ctx, errs.Field("reason", "is longer than 2000 bytes"))
	}
	in, bg, max, err := s.breakGlassPolicy(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if len(bg.Roles) == 0 {
		return nil, s.err(ctx, errs.Field("role", "the app declares no break-glass roles: add a [[role]] to break_glass.toml"))
	}
	role := bg.Roles[0]
	if m.Role != "" {
		found := false
		names := make([]string, len(bg.Roles))
		for i, r := range bg.Roles {
			names[i] = r.Name
			if r.Name == m.Role {
				role, found = r, true
			}
		}
		if !found {
			return nil, s.err(ctx, errs.Field("role", "%q is not a role of break_glass.toml: want one of %s", m.Role, strings.Join(names, ", ")))
		}
	}
	d := time.Duration(m.DurationSeconds) * time.Second
	if d > max {
		return nil, s.err(ctx, errs.Field("duration_seconds", "%s is longer than break_glass.toml's max_duration %s", d, max))
	}
	if bg.RequireReason && strings.TrimSpace(m.Reason) == "" {
		return nil, s.err(ctx, errs.Field("reason", "is required: break_glass.toml has require_reason"))
	}
	now := s.now()
	g := store.BreakGlassGrant{ID: auth.NewID("bg_"), InstallID: in.ID, Role: role.Name, RoleDescription: role.Description,
		Reason: strings.TrimSpace(m.Reason), RequestedBy: callerFrom(ctx).Name, RequestedAt: now, Duration: d,
		RequestExpiresAt: now.Add(s.cfg.BreakGlassRequestTTL)}
	if g.RequestedBy == "" {
		g.RequestedBy = "unknown"
	}
	if err := s.store.CreateBreakGlassRequest(ctx, g); err != nil {
		return nil, s.err(ctx, err)
	}
	g.State = store.GrantPending
	s.log.InfoContext(ctx, "break-glass requested", "grant", g.ID, "install", in.Name, "role", g.Role, "by", g.RequestedBy, "for", d)
	return connect.NewResponse(&imsv1.RequestBreakGlassResponse{Grant: grantProto(g, in.Name, now)}), nil
}

// breakGlassPolicy reads install's app's break_glass.toml (from the
// revision the install applied, else the app's latest) and its longest
// grant.
func (s *Service) breakGlassPolicy(ctx context.Context, install string) (store.Install, config.BreakGlass, time.Duration, error) {
	e, err := s.engine()
	if err != nil {
		return store.Install{}, config.BreakGlass{}, 0, err
	}
	in, err := s.store.GetInstall(ctx, install)
	if err != nil {
		return store.Install{}, config.BreakGlass{}, 0, err
	}
	app, _, err := e.InstallRevision(ctx, in)
	if err != nil {
		return store.Install{}, config.BreakGlass{}, 0, err
	}
	max := time.Duration(app.BreakGlass.MaxDuration)
	if max <= 0 {
		max = time.Hour // break_glass.toml's default
	}
	return in, app.BreakGlass, min(max, maxGrant), nil
}

// GetBreakGlassPolicy says what a request on an install may ask for.
func (s *Service) GetBreakGlassPolicy(ctx context.Context, req *connect.Request[imsv1.GetBreakGlassPolicyRequest]) (*connect.Response[imsv1.GetBreakGlassPolicyResponse], error) {
	if req.Msg.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	_, bg, max, err := s.breakGlassPolicy(ctx, req.Msg.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.GetBreakGlassPolicyResponse{MaxDurationSeconds: int64(max / time.Second), RequireReason: bg.RequireReason}
	for _, r := range bg.Roles {
		out.Roles = append(out.Roles, &imsv1.BreakGlassRole{Name: r.Name, Description: r.Description})
	}
	return connect.NewResponse(out), nil
}

// ListBreakGlassGrants lists requests and grants with their state now.
func (s *Service) ListBreakGlassGrants(ctx context.Context, req *connect.Request[imsv1.ListBreakGlassGrantsRequest]) (*connect.Response[imsv1.ListBreakGlassGrantsResponse], error) {
	installID := ""
	names := map[string]string{}
	if req.Msg.Install != "" {
		in, err := s.store.GetInstall(ctx, req.Msg.Install)
		if err != nil {
			return nil, s.err(ctx, err)
		}
		installID, names[in.ID] = in.ID, in.Name
	}
	selected, err := s.selectedInstalls(ctx, "selector", req.Msg.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	gs, err := s.store.ListBreakGlassGrants(ctx, installID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if selected != nil {
		gs = slices.DeleteFunc(gs, func(g store.BreakGlassGrant) bool { return !slices.Contains(selected, g.InstallID) })
	}
	now := s.now()
	out := &imsv1.ListBreakGlassGrantsResponse{}
	for _, g := range gs {
		name, ok := names[g.InstallID]
		if !ok {
			if in, err := s.store.GetInstall(ctx, g.InstallID); err == nil {
				name = in.Name
			}
			names[g.InstallID] = name
		}
		out.Grants = append(out.Grants, grantProto(g, name, now))
	}
	return connect.NewResponse(out), nil
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func grantProto(g store.BreakGlassGrant, installName string, now time.Time) *imsv1.BreakGlassGrant {
	return &imsv1.BreakGlassGrant{Id: g.ID, InstallId: g.InstallID, InstallName: installName, Role: g.Role,
		Reason: g.Reason, RequestedBy: g.RequestedBy, RequestTime: tsOrNil(g.RequestedAt),
		DurationSeconds: int64(g.Duration / time.Second), RequestExpireTime: tsOrNil(g.RequestExpiresAt),
		State: string(g.StateAt(now)), DecidedBy: g.DecidedBy, DecideTime: tsOrNil(g.DecidedAt),
		DecisionReason: g.DecisionReason, ExpireTime: tsOrNil(g.ExpiresAt), RevokedBy: g.RevokedBy,
		RevokeTime: tsOrNil(g.RevokedAt), Signed: len(g.Signature) > 0}
}
