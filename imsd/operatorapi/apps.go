package operatorapi

import (
	"context"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// CreateApp creates an app.
func (s *Service) CreateApp(ctx context.Context, req *connect.Request[imsv1.CreateAppRequest]) (*connect.Response[imsv1.CreateAppResponse], error) {
	m := req.Msg
	if err := checkName("name", m.Name); err != nil {
		return nil, s.err(ctx, err)
	}
	if len(m.Description) > 1024 {
		return nil, s.err(ctx, errs.Field("description", "is longer than 1024 bytes"))
	}
	a := store.App{ID: auth.NewID("app_"), Name: m.Name, Description: m.Description, CreatedAt: s.now()}
	if err := s.store.CreateApp(ctx, a); err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.CreateAppResponse{App: appToProto(a)}), nil
}

// ListApps lists every app but the vendor's build agent's reserved one
// (_vendor), which it lists only when asked for (app list --all).
func (s *Service) ListApps(ctx context.Context, req *connect.Request[imsv1.ListAppsRequest]) (*connect.Response[imsv1.ListAppsResponse], error) {
	apps, err := s.store.ListApps(ctx)
	if err == nil && !req.Msg.IncludeVendor {
		apps = store.CustomerApps(apps)
	}
	if err == nil {
		apps, err = s.visibleApps(ctx, apps)
	}
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListAppsResponse{}
	for _, a := range apps {
		out.Apps = append(out.Apps, appToProto(a))
	}
	return connect.NewResponse(out), nil
}

// GetApp returns one app.
func (s *Service) GetApp(ctx context.Context, req *connect.Request[imsv1.GetAppRequest]) (*connect.Response[imsv1.GetAppResponse], error) {
	if req.Msg.IdOrName == "" {
		return nil, s.err(ctx, errs.Field("id_or_name", "is required"))
	}
	a, err := s.store.GetApp(ctx, req.Msg.IdOrName)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetAppResponse{App: appToProto(a)}), nil
}
