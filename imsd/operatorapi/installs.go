package operatorapi

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// CreateInstall creates an install and its first enrolment token.
func (s *Service) CreateInstall(ctx context.Context, req *connect.Request[imsv1.CreateInstallRequest]) (*connect.Response[imsv1.CreateInstallResponse], error) {
	m := req.Msg
	if m.App == "" {
		return nil, s.err(ctx, errs.Field("app", "is required"))
	}
	if err := checkName("name", m.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	if err := checkInputs("inputs", m.Inputs); err != nil {
		return nil, s.err(ctx, err)
	}
	if err := labels.Validate(m.Labels); err != nil {
		return nil, s.err(ctx, errs.Field("labels", "%v", err))
	}
	life, err := ttl("enrollment_token_ttl_seconds", m.EnrollmentTokenTtlSeconds)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	app, err := s.store.GetApp(ctx, m.App)
	if errs.Is(err, errs.NotFound) {
		return nil, s.err(ctx, errs.Field("app", "no app named %q; create it with `byoc app create`", m.App))
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if app.IsVendor() {
		// Its one install is the build agent's (byoc build agent-token);
		// another would be hidden from install list like it.
		return nil, s.err(ctx, errs.Field("app", "%q is reserved for the vendor's build install; create installs of your own apps", m.App))
	}
	now := s.now()
	in := store.Install{ID: auth.NewID("ins_"), AppID: app.ID, Name: m.Name, Inputs: m.Inputs, Labels: m.Labels, CreatedAt: now}
	if in.Inputs == nil {
		in.Inputs = map[string]string{}
	}
	secret, hash := auth.NewEnrollToken(s.cfg.SigningKeyID)
	et := store.EnrollmentToken{Hash: hash, InstallID: in.ID, ExpiresAt: now.Add(life), CreatedAt: now}
	if err := s.store.CreateInstall(ctx, in, et); err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.FleetChanged()
	s.log.InfoContext(ctx, "install created", "install", in.ID, "name", in.Name, "app", app.Name, "by", callerFrom(ctx).Name)
	return connect.NewResponse(&imsv1.CreateInstallResponse{
		Install:         s.installToProto(ctx, in),
		EnrollmentToken: &imsv1.EnrollmentToken{Token: secret, ExpireTime: timestamppb.New(et.ExpiresAt)},
	}), nil
}

// ListInstalls lists installs, optionally of one app.
func (s *Service) ListInstalls(ctx context.Context, req *connect.Request[imsv1.ListInstallsRequest]) (*connect.Response[imsv1.ListInstallsResponse], error) {
	sel, err := parseSelector("selector", req.Msg.Selector)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	appID := ""
	if req.Msg.App != "" {
		if err := s.requireAppRead(ctx, req.Msg.App); err != nil {
			return nil, s.err(ctx, err)
		}
		app, err := s.store.GetApp(ctx, req.Msg.App)
		if errs.Is(err, errs.NotFound) {
			return nil, s.err(ctx, errs.Field("app", "no app named %q", req.Msg.App))
		}
		if err != nil {
			return nil, s.err(ctx, err)
		}
		appID = app.ID
	}
	ins, err := s.store.ListInstalls(ctx, appID)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	if !req.Msg.IncludeVendor && appID != store.VendorAppID {
		// The vendor's build agent's install is listed only when asked
		// for (install list --all, or --app _vendor).
		ins = store.CustomerInstalls(ins)
	}
	ins = matchInstalls(ins, sel)
	v, err := s.readView(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListInstallsResponse{}
	mask := s.inputMasker()
	for _, in := range ins {
		if !v.visible(in.ID) {
			continue
		}
		out.Installs = append(out.Installs, s.installToProtoMasked(ctx, in, mask))
	}
	return connect.NewResponse(out), nil
}

// GetInstall returns one install with its agent's status.
func (s *Service) GetInstall(ctx context.Context, req *connect.Request[imsv1.GetInstallRequest]) (*connect.Response[imsv1.GetInstallResponse], error) {
	if req.Msg.IdOrName == "" {
		return nil, s.err(ctx, errs.Field("id_or_name", "is required"))
	}
	in, err := s.store.GetInstall(ctx, req.Msg.IdOrName)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetInstallResponse{Install: s.installToProto(ctx, in)}), nil
}
