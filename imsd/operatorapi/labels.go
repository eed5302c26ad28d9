package operatorapi

import (
	"context"
	"maps"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/labels"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// parseSelector reads the label selector of request field field.
func parseSelector(field, text string) (labels.Selector, error) {
	sel, err := labels.Parse(text)
	if err != nil {
		return labels.Selector{}, errs.Field(field, "%v", err)
	}
	return sel, nil
}

// selectedInstalls resolves the label selector of request field field to
// the ids of the installs it matches; nil (no filter) for an empty
// selector. Selectors are evaluated here, in imsd, so a list of a large
// fleet is filtered before it is sent.
func (s *Service) selectedInstalls(ctx context.Context, field, text string) ([]string, error) {
	sel, err := parseSelector(field, text)
	if err != nil || sel.Empty() {
		return nil, err
	}
	ins, err := s.store.ListInstalls(ctx, "")
	if err != nil {
		return nil, err
	}
	ins = store.CustomerInstalls(ins)
	ids := []string{}
	for _, in := range ins {
		if sel.Matches(in.Labels) {
			ids = append(ids, in.ID)
		}
	}
	return ids, nil
}

// LabelInstall sets and removes an install's labels; changing a value
// needs overwrite, as kubectl label does.
func (s *Service) LabelInstall(ctx context.Context, req *connect.Request[imsv1.LabelInstallRequest]) (*connect.Response[imsv1.LabelInstallResponse], error) {
	m := req.Msg
	if m.Install == "" {
		return nil, s.err(ctx, errs.Field("install", "is required"))
	}
	if len(m.Set) == 0 && len(m.Remove) == 0 {
		return nil, s.err(ctx, errs.Field("set", "name a label to set or remove"))
	}
	change := labels.Change{Set: maps.Clone(m.Set), Remove: m.Remove}
	for k, v := range m.Set {
		if err := labels.ValidateKey(k); err != nil {
			return nil, s.err(ctx, errs.Field("set", "%v", err))
		}
		if err := labels.ValidateValue(k, v); err != nil {
			return nil, s.err(ctx, errs.Field("set", "%v", err))
		}
	}
	for _, k := range m.Remove {
		if err := labels.ValidateKey(k); err != nil {
			return nil, s.err(ctx, errs.Field("remove", "%v", err))
		}
		if _, both := m.Set[k]; both {
			return nil, s.err(ctx, errs.Field("remove", "label %q is both set and removed", k))
		}
	}
	in, err := s.store.GetInstall(ctx, m.Install)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	next, err := change.Apply(in.Labels, m.Overwrite)
	if err != nil {
		return nil, s.err(ctx, errs.E(errs.Conflict, "%v", err))
	}
	if in, err = s.store.SetInstallLabels(ctx, in.ID, next, "token:"+callerFrom(ctx).Name, s.now()); err != nil {
		return nil, s.err(ctx, err)
	}
	s.hub.FleetChanged()
	return connect.NewResponse(&imsv1.LabelInstallResponse{Install: s.installToProto(ctx, in)}), nil
}

// matchInstalls keeps the installs sel matches.
func matchInstalls(ins []store.Install, sel labels.Selector) []store.Install {
	if sel.Empty() {
		return ins
	}
	out := ins[:0:0]
	for _, in := range ins {
		if sel.Matches(in.Labels) {
			out = append(out, in)
		}
	}
	return out
}
