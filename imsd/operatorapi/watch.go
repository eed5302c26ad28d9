package operatorapi

import (
	"context"
	"sort"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// from what this stream sent before.
func (s *Service) WatchInstalls(ctx context.Context, req *connect.Request[imsv1.WatchInstallsRequest], out *connect.ServerStream[imsv1.WatchInstallsResponse]) error {
	sel, err := parseSelector("selector", req.Msg.Selector)
	if err != nil {
		return s.err(ctx, err)
	}
	appID := ""
	if req.Msg.App != "" {
		if err := s.requireAppRead(ctx, req.Msg.App); err != nil {
			return s.err(ctx, err)
		}
		app, err := s.store.GetApp(ctx, req.Msg.App)
		if errs.Is(err, errs.NotFound) {
			return s.err(ctx, errs.Field("app", "no app named %q", req.Msg.App))
		}
		if err != nil {
			return s.err(ctx, err)
		}
		appID = app.ID
	}
	var sent map[string]*imsv1.InstallStatus
	for {
		signal := s.hub.FleetSignal()
		if sent != nil {
			// A revoked token or a grant no longer covering what the
			// request asked for ends the view.
			if err := stillAllowed(ctx); err != nil {
				return err
			}
		}
		read := time.Now()
		cur, err := s.fleet(ctx, appID, sel)
		if err != nil {
			return s.err(ctx, err)
		}
		resp := &imsv1.WatchInstallsResponse{Snapshot: sent == nil}
		for id, st := range cur {
			if old, ok := sent[id]; sent == nil || !ok || !proto.Equal(old, st) {
				resp.Installs = append(resp.Installs, st)
			}
		}
		for id := range sent {
			if _, ok := cur[id]; !ok {
				resp.RemovedInstallIds = append(resp.RemovedInstallIds, id)
			}
		}
		if resp.Snapshot || len(resp.Installs) > 0 || len(resp.RemovedInstallIds) > 0 {
			sort.Slice(resp.Installs, func(i, j int) bool { return resp.Installs[i].Install.Name < resp.Installs[j].Install.Name })
			if err := out.Send(resp); err != nil {
				return err
			}
		}
		sent = cur
		t := time.NewTimer(s.cfg.FleetPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-signal:
		case <-t.C:
		}
		t.Stop()
		// Let a burst of changes settle into one read.
		if wait := s.cfg.FleetCoalesce - time.Since(read); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// fleet reads every install's status, keyed by install id.
func (s *Service) fleet(ctx context.Context, appID string, sel labels.Selector) (map[string]*imsv1.InstallStatus, error) {
	fs, err := s.store.Fleet(ctx, appID)
	if err != nil {
		return nil, err
	}
	apps, err := s.store.ListApps(ctx)
	if err != nil {
		return nil, err
	}
	appNames := make(map[string]string, len(apps))
	for _, a := range apps {
		appNames[a.ID] = a.Name
	}
	v, err := s.readView(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*imsv1.InstallStatus, len(fs.Installs))
	mask := s.inputMasker()
	ins := fs.Installs
	if appID != store.VendorAppID {
		ins = store.CustomerInstalls(ins) // the build agent's install is no customer's
	}
	for _, in := range matchInstalls(ins, sel) {
		if !v.visible(in.ID) {
			continue
		}
		p := &imsv1.Install{Id: in.ID, AppId: in.AppID, Name: in.Name, Inputs: mask.inputs(ctx, in), CreateTime: ts(in.CreatedAt),
			State: string(in.State), AppRevision: in.AppRevision, Settings: settingsToProto(in.Settings), Labels: in.Labels}
		p.Agent = s.agentStatus(fs.Agents[in.ID])
		out[in.ID] = &imsv1.InstallStatus{
			Install: p, AppName: appNames[in.AppID],
			QueuedJobs: int32(fs.Queued[in.ID]), RunningJobs: int32(fs.Active[in.ID]),
		}
	}
	return out, nil
}
