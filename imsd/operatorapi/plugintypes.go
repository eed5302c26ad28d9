package operatorapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/plugins/typeschema"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// registerHint is how an operator makes a third-party type known.
const registerHint = "register a third-party type with: byoc-plugin-TYPE describe | byoc plugin register -"

// RegisterPluginType registers a third-party component type from its
// plugin's describe output.
func (s *Service) RegisterPluginType(ctx context.Context, req *connect.Request[imsv1.RegisterPluginTypeRequest]) (*connect.Response[imsv1.RegisterPluginTypeResponse], error) {
	if strings.TrimSpace(req.Msg.Description) == "" {
		return nil, s.err(ctx, errs.Field("description", "is required: the JSON that byoc-plugin-TYPE describe prints"))
	}
	d, _, err := typeschema.ParseDescription([]byte(req.Msg.Description))
	if err != nil {
		return nil, s.err(ctx, errs.Field("description", "%v", err))
	}
	if err := typeschema.CheckProtocol(d); err != nil {
		return nil, s.err(ctx, errs.Field("description", "%v", err))
	}
	if typeschema.IsBuiltin(d.Type) {
		return nil, s.err(ctx, errs.Field("description", "type: %q is a built-in type; a third-party type needs a name of its own", d.Type))
	}
	desc, err := json.Marshal(d)
	if err != nil {
		return nil, s.err(ctx, fmt.Errorf("register plugin type %s: %w", d.Type, err))
	}
	p := store.PluginType{Type: d.Type, Version: d.Version, Protocol: d.Protocol, Description: string(desc),
		ConfigSchema: string(d.ConfigSchema), RegisteredAt: s.now(), RegisteredBy: callerFrom(ctx).Name}
	prev, replaced, err := s.store.PutPluginType(ctx, p)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.RegisterPluginTypeResponse{PluginType: pluginTypeToProto(p, true)}
	if replaced {
		out.Replaced = pluginTypeToProto(prev, false)
	}
	return connect.NewResponse(out), nil
}

// ListPluginTypes lists the built-in types, then the registered ones.
func (s *Service) ListPluginTypes(ctx context.Context, _ *connect.Request[imsv1.ListPluginTypesRequest]) (*connect.Response[imsv1.ListPluginTypesResponse], error) {
	types, err := s.store.ListPluginTypes(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := &imsv1.ListPluginTypesResponse{}
	for _, name := range typeschema.BuiltinNames() {
		out.PluginTypes = append(out.PluginTypes, builtinToProto(name, false))
	}
	for _, p := range types {
		out.PluginTypes = append(out.PluginTypes, pluginTypeToProto(p, false))
	}
	return connect.NewResponse(out), nil
}

// GetPluginType returns a built-in or registered type with its schemas.
func (s *Service) GetPluginType(ctx context.Context, req *connect.Request[imsv1.GetPluginTypeRequest]) (*connect.Response[imsv1.GetPluginTypeResponse], error) {
	typ := req.Msg.Type
	if typ == "" {
		return nil, s.err(ctx, errs.Field("type", "is required"))
	}
	if typeschema.IsBuiltin(typ) {
		return connect.NewResponse(&imsv1.GetPluginTypeResponse{PluginType: builtinToProto(typ, true)}), nil
	}
	p, err := s.store.GetPluginType(ctx, typ)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.GetPluginTypeResponse{PluginType: pluginTypeToProto(p, true)}), nil
}

// RemovePluginType removes a registered type.
func (s *Service) RemovePluginType(ctx context.Context, req *connect.Request[imsv1.RemovePluginTypeRequest]) (*connect.Response[imsv1.RemovePluginTypeResponse], error) {
	typ := req.Msg.Type
	switch {
	case typ == "":
		return nil, s.err(ctx, errs.Field("type", "is required"))
	case typeschema.IsBuiltin(typ):
		return nil, s.err(ctx, errs.Field("type", "%q is a built-in type and cannot be removed", typ))
	}
	if err := s.store.DeletePluginType(ctx, typ, s.now()); err != nil {
		return nil, s.err(ctx, err)
	}
	return connect.NewResponse(&imsv1.RemovePluginTypeResponse{}), nil
}

// configOptions returns the validator options of a push: the built-in
// types and every registered one, with their config schemas.
func (s *Service) configOptions(ctx context.Context) (validate.Options, error) {
	types, err := s.store.ListPluginTypes(ctx)
	if err != nil {
		return validate.Options{}, err
	}
	registered := make(map[string]*configschema.Schema, len(types))
	for _, p := range types {
		registered[p.Type] = nil
		if p.ConfigSchema == "" {
			continue
		}
		// Schemas were compiled when they were registered; one failing
		// now means the validator grew stricter since.
		sch, err := configschema.Compile(p.ConfigSchema)
		if err != nil {
			return validate.Options{}, errs.E(errs.Conflict,
				"the registered config schema of component type %q no longer compiles (%v); register the type again with a schema this imsd accepts", p.Type, err)
		}
		registered[p.Type] = sch
	}
	checks := typeschema.Types(registered)
	for _, p := range types {
		if check := checks[p.Type]; check != nil {
			checks[p.Type] = staleHint(p, check)
		}
		// A registration from before reserved keys were refused: every
		// config of the type says so, since the agent would take the key
		// out and the plugin would never see it.
		if err := jobconfig.CheckSchema(p.ConfigSchema); err != nil {
			msg := fmt.Sprintf("type %s is registered (version %s) with a config schema that %v", p.Type, p.Version, err)
			checks[p.Type] = func(map[string]any) []validate.FieldProblem {
				return []validate.FieldProblem{{Message: msg, Hint: fmt.Sprintf("fix the plugin and register it again: byoc-plugin-%s describe | byoc plugin register -", p.Type)}}
			}
		}
	}
	return validate.Options{Types: checks, TypeHint: registerHint}, nil
}

// staleHint adds to a registered type's check, when it finds an unknown
// field, a problem that points at the registration: a plugin rebuilt with
// a new field and not registered again is the usual cause.
func staleHint(p store.PluginType, check validate.ConfigCheck) validate.ConfigCheck {
	return func(config map[string]any) []validate.FieldProblem {
		ps := check(config)
		for _, fp := range ps {
			// A typo of a known field is not about the registration.
			name := fp.Field
			if i := strings.LastIndexAny(fp.Field, ".]"); i >= 0 {
				name = fp.Field[i+1:]
			}
			known, _ := strings.CutPrefix(fp.Hint, "known fields: ")
			if fp.Message == "unknown field" && diag.DidYouMean(name, strings.Split(known, ", ")) == "" {
				return append(ps, validate.FieldProblem{
					Message: fmt.Sprintf("type %s is registered as version %s (%s), whose schema has no such field; if the plugin has it now, that registration is stale",
						p.Type, p.Version, p.RegisteredAt.UTC().Format("2006-01-02 15:04 UTC")),
					Hint: fmt.Sprintf("register the new version: byoc-plugin-%s describe | byoc plugin register -", p.Type),
				})
			}
		}
		return ps
	}
}

// storedOptions reads stored revisions again: they were valid when pushed,
// and a type registered then may be gone now.
func storedOptions() validate.Options { return validate.Options{AnyType: true, Stored: true} }

func builtinToProto(name string, withSchema bool) *imsv1.PluginType {
	out := &imsv1.PluginType{Type: name, Builtin: true}
	if src, _ := typeschema.BuiltinSchema(name); withSchema && src != "" {
		out.ConfigSchema = schemaValue(src)
	}
	return out
}

func pluginTypeToProto(p store.PluginType, withSchema bool) *imsv1.PluginType {
	out := &imsv1.PluginType{Type: p.Type, Version: p.Version, Protocol: p.Protocol,
		RegisterTime: timestamppb.New(p.RegisteredAt), RegisteredBy: p.RegisteredBy}
	var d typeschema.Description
	if err := json.Unmarshal([]byte(p.Description), &d); err == nil {
		out.Capabilities = d.Capabilities
		if withSchema && len(d.OutputsSchema) > 0 {
			out.OutputsSchema = schemaValue(string(d.OutputsSchema))
		}
	}
	if withSchema && p.ConfigSchema != "" {
		out.ConfigSchema = schemaValue(p.ConfigSchema)
	}
	return out
}

// schemaValue turns a JSON Schema's text into a protobuf Value (nil if it
// is not JSON, which a stored schema always is).
func schemaValue(src string) *structpb.Value {
	var v any
	if err := json.Unmarshal([]byte(src), &v); err != nil {
		return nil
	}
	out, err := structpb.NewValue(v)
	if err != nil {
		return nil
	}
	return out
}
