// Package server serves a provider schema over Terraform's plugin
// protocol 5 (hashicorp/google's) and nothing else: the schema RPCs
// answer from the schema file; the Validate RPCs report only computed-only
// attributes set in the configuration (a schema check Terraform leaves
// to providers), so what `terraform validate` reports is otherwise
// Terraform's own check of the configuration against the schema; and
// every RPC that would configure the provider, plan, apply, read or
// import fails with an error saying this is a schema-only stand-in.
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/hashicorp/terraform-plugin-go/tfprotov5"
	"github.com/hashicorp/terraform-plugin-go/tfprotov5/tf5server"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/byoc-dev/byoc/tools/tfgoogleschema/schema"
)

// Address is the provider this stands in for.
const Address = "registry.terraform.io/hashicorp/google"

// Serve serves the schema in the file at path as the provider's, until
// Terraform stops the plugin.
func Serve(path string) error {
	p := New(path)
	return tf5server.Serve(Address, func() tfprotov5.ProviderServer { return p })
}

// Provider is the stand-in provider. Its schema is read on first use, so
// a broken schema file is reported as a diagnostic Terraform prints
// rather than as a plugin that exited during its handshake.
type Provider struct {
	path string

	once   sync.Once
	schema *tfprotov5.GetProviderSchemaResponse
	err    error
}

// New returns a provider serving the schema in the file at path.
func New(path string) *Provider { return &Provider{path: path} }

func (p *Provider) load() (*tfprotov5.GetProviderSchemaResponse, error) {
	p.once.Do(func() {
		s, err := schema.Read(p.path)
		if err != nil {
			p.err = err
			return
		}
		p.schema, p.err = Convert(s)
	})
	return p.schema, p.err
}

// Convert turns a schema file's schemas into the protocol's.
func Convert(s *schema.Provider) (*tfprotov5.GetProviderSchemaResponse, error) {
	r := &tfprotov5.GetProviderSchemaResponse{
		ServerCapabilities:       &tfprotov5.ServerCapabilities{},
		ResourceSchemas:          map[string]*tfprotov5.Schema{},
		DataSourceSchemas:        map[string]*tfprotov5.Schema{},
		Functions:                map[string]*tfprotov5.Function{},
		EphemeralResourceSchemas: map[string]*tfprotov5.Schema{},
	}
	var err error
	if r.Provider, err = convertSchema(s.Provider); err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	for n, rs := range s.ResourceSchemas {
		if r.ResourceSchemas[n], err = convertSchema(rs); err != nil {
			return nil, fmt.Errorf("resource %s: %w", n, err)
		}
	}
	for n, ds := range s.DataSourceSchemas {
		if r.DataSourceSchemas[n], err = convertSchema(ds); err != nil {
			return nil, fmt.Errorf("data source %s: %w", n, err)
		}
	}
	return r, nil
}

func convertSchema(s *schema.Schema) (*tfprotov5.Schema, error) {
	b, err := convertBlock(s.Block)
	if err != nil {
		return nil, err
	}
	return &tfprotov5.Schema{Version: s.Version, Block: b}, nil
}

func convertBlock(b *schema.Block) (*tfprotov5.SchemaBlock, error) {
	out := &tfprotov5.SchemaBlock{}
	for _, n := range sortedKeys(b.Attributes) {
		a := b.Attributes[n]
		t, err := parseType(a.Type)
		if err != nil {
			return nil, fmt.Errorf("%s: type %s: %w", n, a.Type, err)
		}
		out.Attributes = append(out.Attributes, &tfprotov5.SchemaAttribute{Name: n, Type: t, Required: a.Required, Optional: a.Optional, Computed: a.Computed})
	}
	for _, n := range sortedKeys(b.BlockTypes) {
		nb := b.BlockTypes[n]
		inner, err := convertBlock(nb.Block)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		var mode tfprotov5.SchemaNestedBlockNestingMode
		switch nb.NestingMode {
		case schema.NestingSingle:
			mode = tfprotov5.SchemaNestedBlockNestingModeSingle
		case schema.NestingList:
			mode = tfprotov5.SchemaNestedBlockNestingModeList
		case schema.NestingSet:
			mode = tfprotov5.SchemaNestedBlockNestingModeSet
		default:
			return nil, fmt.Errorf("%s: nesting mode %q", n, nb.NestingMode)
		}
		out.BlockTypes = append(out.BlockTypes, &tfprotov5.SchemaNestedBlock{TypeName: n, Block: inner, Nesting: mode, MinItems: nb.MinItems, MaxItems: nb.MaxItems})
	}
	return out, nil
}

// parseType reads a cty type in cty's JSON form: "string", "number",
// "bool", "dynamic", [KIND, ELEM] for list, set and map, ["object",
// {NAME: TYPE}] and ["tuple", [TYPE...]]. (tftypes.ParseJSONType does
// this but is deprecated for use outside Terraform's own SDKs.)
func parseType(raw json.RawMessage) (tftypes.Type, error) {
	var prim string
	if json.Unmarshal(raw, &prim) == nil {
		switch prim {
		case "string":
			return tftypes.String, nil
		case "number":
			return tftypes.Number, nil
		case "bool":
			return tftypes.Bool, nil
		case "dynamic":
			return tftypes.DynamicPseudoType, nil
		}
		return nil, fmt.Errorf("unknown type %q", prim)
	}
	var pair []json.RawMessage
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return nil, fmt.Errorf("not a type: %s", raw)
	}
	var kind string
	if err := json.Unmarshal(pair[0], &kind); err != nil {
		return nil, fmt.Errorf("not a type: %s", raw)
	}
	switch kind {
	case "list", "set", "map":
		elem, err := parseType(pair[1])
		if err != nil {
			return nil, err
		}
		switch kind {
		case "list":
			return tftypes.List{ElementType: elem}, nil
		case "set":
			return tftypes.Set{ElementType: elem}, nil
		}
		return tftypes.Map{ElementType: elem}, nil
	case "object":
		var attrs map[string]json.RawMessage
		if err := json.Unmarshal(pair[1], &attrs); err != nil {
			return nil, fmt.Errorf("object type: %w", err)
		}
		obj := tftypes.Object{AttributeTypes: map[string]tftypes.Type{}}
		for n, a := range attrs {
			t, err := parseType(a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			obj.AttributeTypes[n] = t
		}
		return obj, nil
	case "tuple":
		var elems []json.RawMessage
		if err := json.Unmarshal(pair[1], &elems); err != nil {
			return nil, fmt.Errorf("tuple type: %w", err)
		}
		tup := tftypes.Tuple{}
		for _, e := range elems {
			t, err := parseType(e)
			if err != nil {
				return nil, err
			}
			tup.ElementTypes = append(tup.ElementTypes, t)
		}
		return tup, nil
	}
	return nil, fmt.Errorf("unknown type kind %q", kind)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// standIn is the error every RPC that would act answers with.
func standIn(what string) []*tfprotov5.Diagnostic {
	return []*tfprotov5.Diagnostic{{
		Severity: tfprotov5.DiagnosticSeverityError,
		Summary:  "Schema-only stand-in for hashicorp/google",
		Detail:   what + " is not possible: this provider is byoc's schema-only stand-in for hashicorp/google (tools/tfgoogleschema), built for terraform validate. Install the real provider to plan or apply.",
	}}
}

func loadDiags(err error) []*tfprotov5.Diagnostic {
	return []*tfprotov5.Diagnostic{{
		Severity: tfprotov5.DiagnosticSeverityError,
		Summary:  "Stand-in hashicorp/google has no schema",
		Detail:   err.Error(),
	}}
}

func (p *Provider) GetMetadata(ctx context.Context, _ *tfprotov5.GetMetadataRequest) (*tfprotov5.GetMetadataResponse, error) {
	s, err := p.load()
	if err != nil {
		return &tfprotov5.GetMetadataResponse{Diagnostics: loadDiags(err)}, nil
	}
	r := &tfprotov5.GetMetadataResponse{ServerCapabilities: s.ServerCapabilities}
	for _, n := range sortedKeys(s.ResourceSchemas) {
		r.Resources = append(r.Resources, tfprotov5.ResourceMetadata{TypeName: n})
	}
	for _, n := range sortedKeys(s.DataSourceSchemas) {
		r.DataSources = append(r.DataSources, tfprotov5.DataSourceMetadata{TypeName: n})
	}
	return r, nil
}

func (p *Provider) GetProviderSchema(ctx context.Context, _ *tfprotov5.GetProviderSchemaRequest) (*tfprotov5.GetProviderSchemaResponse, error) {
	s, err := p.load()
	if err != nil {
		return &tfprotov5.GetProviderSchemaResponse{Diagnostics: loadDiags(err)}, nil
	}
	return s, nil
}

func (p *Provider) GetResourceIdentitySchemas(context.Context, *tfprotov5.GetResourceIdentitySchemasRequest) (*tfprotov5.GetResourceIdentitySchemasResponse, error) {
	return &tfprotov5.GetResourceIdentitySchemasResponse{IdentitySchemas: map[string]*tfprotov5.ResourceIdentitySchema{}}, nil
}

func (p *Provider) PrepareProviderConfig(_ context.Context, req *tfprotov5.PrepareProviderConfigRequest) (*tfprotov5.PrepareProviderConfigResponse, error) {
	return &tfprotov5.PrepareProviderConfigResponse{PreparedConfig: req.Config}, nil
}

func (p *Provider) ConfigureProvider(context.Context, *tfprotov5.ConfigureProviderRequest) (*tfprotov5.ConfigureProviderResponse, error) {
	return &tfprotov5.ConfigureProviderResponse{Diagnostics: standIn("Configuring the provider")}, nil
}

func (p *Provider) StopProvider(context.Context, *tfprotov5.StopProviderRequest) (*tfprotov5.StopProviderResponse, error) {
	return &tfprotov5.StopProviderResponse{}, nil
}

func (p *Provider) ValidateResourceTypeConfig(_ context.Context, req *tfprotov5.ValidateResourceTypeConfigRequest) (*tfprotov5.ValidateResourceTypeConfigResponse, error) {
	s, err := p.load()
	if err != nil {
		return &tfprotov5.ValidateResourceTypeConfigResponse{Diagnostics: loadDiags(err)}, nil
	}
	return &tfprotov5.ValidateResourceTypeConfigResponse{Diagnostics: computedSet(s.ResourceSchemas[req.TypeName], req.Config)}, nil
}

// computedSet reports the computed-only attributes config sets. Terraform
// leaves this check to the provider (the SDK the real one is built on
// makes it for every resource type and data source), so a stand-in that
// answered nothing would let such a configuration through. It is the one
// check made here: it needs only the schema.
func computedSet(s *tfprotov5.Schema, config *tfprotov5.DynamicValue) []*tfprotov5.Diagnostic {
	if s == nil || config == nil {
		return nil // Terraform reports an unknown type itself
	}
	v, err := config.Unmarshal(s.Block.ValueType())
	if err != nil {
		return []*tfprotov5.Diagnostic{{Severity: tfprotov5.DiagnosticSeverityError, Summary: "Stand-in hashicorp/google cannot read the configuration", Detail: err.Error()}}
	}
	var diags []*tfprotov5.Diagnostic
	walkComputed(s.Block, v, tftypes.NewAttributePath(), &diags)
	return diags
}

func walkComputed(b *tfprotov5.SchemaBlock, v tftypes.Value, path *tftypes.AttributePath, diags *[]*tfprotov5.Diagnostic) {
	if v.IsNull() || !v.IsKnown() {
		return
	}
	var m map[string]tftypes.Value
	if v.As(&m) != nil {
		return
	}
	for _, a := range b.Attributes {
		if a.Computed && !a.Optional && !a.Required && !m[a.Name].IsNull() {
			*diags = append(*diags, &tfprotov5.Diagnostic{
				Severity:  tfprotov5.DiagnosticSeverityError,
				Summary:   "Computed attribute cannot be set",
				Detail:    fmt.Sprintf("%q is set by the provider (computed only in hashicorp/google's schema): remove it from the configuration.", a.Name),
				Attribute: path.WithAttributeName(a.Name),
			})
		}
	}
	for _, nb := range b.BlockTypes {
		bv := m[nb.TypeName]
		if bv.IsNull() || !bv.IsKnown() {
			continue
		}
		at := path.WithAttributeName(nb.TypeName)
		switch nb.Nesting {
		case tfprotov5.SchemaNestedBlockNestingModeList, tfprotov5.SchemaNestedBlockNestingModeSet:
			var elems []tftypes.Value
			if bv.As(&elems) != nil {
				continue
			}
			for i, e := range elems {
				ep := at.WithElementKeyInt(i)
				if nb.Nesting == tfprotov5.SchemaNestedBlockNestingModeSet {
					ep = at.WithElementKeyValue(e)
				}
				walkComputed(nb.Block, e, ep, diags)
			}
		default:
			walkComputed(nb.Block, bv, at, diags)
		}
	}
}

func (p *Provider) UpgradeResourceState(_ context.Context, req *tfprotov5.UpgradeResourceStateRequest) (*tfprotov5.UpgradeResourceStateResponse, error) {
	return &tfprotov5.UpgradeResourceStateResponse{Diagnostics: standIn("Reading the state of " + req.TypeName)}, nil
}

func (p *Provider) UpgradeResourceIdentity(_ context.Context, req *tfprotov5.UpgradeResourceIdentityRequest) (*tfprotov5.UpgradeResourceIdentityResponse, error) {
	return &tfprotov5.UpgradeResourceIdentityResponse{Diagnostics: standIn("Reading the identity of " + req.TypeName)}, nil
}

func (p *Provider) ReadResource(_ context.Context, req *tfprotov5.ReadResourceRequest) (*tfprotov5.ReadResourceResponse, error) {
	return &tfprotov5.ReadResourceResponse{Diagnostics: standIn("Reading " + req.TypeName)}, nil
}

func (p *Provider) PlanResourceChange(_ context.Context, req *tfprotov5.PlanResourceChangeRequest) (*tfprotov5.PlanResourceChangeResponse, error) {
	return &tfprotov5.PlanResourceChangeResponse{Diagnostics: standIn("Planning " + req.TypeName)}, nil
}

func (p *Provider) ApplyResourceChange(_ context.Context, req *tfprotov5.ApplyResourceChangeRequest) (*tfprotov5.ApplyResourceChangeResponse, error) {
	return &tfprotov5.ApplyResourceChangeResponse{Diagnostics: standIn("Applying " + req.TypeName)}, nil
}

func (p *Provider) ImportResourceState(_ context.Context, req *tfprotov5.ImportResourceStateRequest) (*tfprotov5.ImportResourceStateResponse, error) {
	return &tfprotov5.ImportResourceStateResponse{Diagnostics: standIn("Importing " + req.TypeName)}, nil
}

func (p *Provider) MoveResourceState(_ context.Context, req *tfprotov5.MoveResourceStateRequest) (*tfprotov5.MoveResourceStateResponse, error) {
	return &tfprotov5.MoveResourceStateResponse{Diagnostics: standIn("Moving state to " + req.TargetTypeName)}, nil
}

func (p *Provider) GenerateResourceConfig(_ context.Context, req *tfprotov5.GenerateResourceConfigRequest) (*tfprotov5.GenerateResourceConfigResponse, error) {
	return &tfprotov5.GenerateResourceConfigResponse{Diagnostics: standIn("Generating configuration for " + req.TypeName)}, nil
}

func (p *Provider) ValidateDataSourceConfig(_ context.Context, req *tfprotov5.ValidateDataSourceConfigRequest) (*tfprotov5.ValidateDataSourceConfigResponse, error) {
	s, err := p.load()
	if err != nil {
		return &tfprotov5.ValidateDataSourceConfigResponse{Diagnostics: loadDiags(err)}, nil
	}
	return &tfprotov5.ValidateDataSourceConfigResponse{Diagnostics: computedSet(s.DataSourceSchemas[req.TypeName], req.Config)}, nil
}

func (p *Provider) ReadDataSource(_ context.Context, req *tfprotov5.ReadDataSourceRequest) (*tfprotov5.ReadDataSourceResponse, error) {
	return &tfprotov5.ReadDataSourceResponse{Diagnostics: standIn("Reading data source " + req.TypeName)}, nil
}

func (p *Provider) CallFunction(_ context.Context, req *tfprotov5.CallFunctionRequest) (*tfprotov5.CallFunctionResponse, error) {
	return &tfprotov5.CallFunctionResponse{Error: &tfprotov5.FunctionError{Text: "function " + req.Name + ": this provider is byoc's schema-only stand-in for hashicorp/google"}}, nil
}

func (p *Provider) GetFunctions(context.Context, *tfprotov5.GetFunctionsRequest) (*tfprotov5.GetFunctionsResponse, error) {
	return &tfprotov5.GetFunctionsResponse{Functions: map[string]*tfprotov5.Function{}}, nil
}

func (p *Provider) ValidateEphemeralResourceConfig(context.Context, *tfprotov5.ValidateEphemeralResourceConfigRequest) (*tfprotov5.ValidateEphemeralResourceConfigResponse, error) {
	return &tfprotov5.ValidateEphemeralResourceConfigResponse{}, nil
}

func (p *Provider) OpenEphemeralResource(_ context.Context, req *tfprotov5.OpenEphemeralResourceRequest) (*tfprotov5.OpenEphemeralResourceResponse, error) {
	return &tfprotov5.OpenEphemeralResourceResponse{Diagnostics: standIn("Opening " + req.TypeName)}, nil
}

func (p *Provider) RenewEphemeralResource(_ context.Context, req *tfprotov5.RenewEphemeralResourceRequest) (*tfprotov5.RenewEphemeralResourceResponse, error) {
	return &tfprotov5.RenewEphemeralResourceResponse{Diagnostics: standIn("Renewing " + req.TypeName)}, nil
}

func (p *Provider) CloseEphemeralResource(_ context.Context, req *tfprotov5.CloseEphemeralResourceRequest) (*tfprotov5.CloseEphemeralResourceResponse, error) {
	return &tfprotov5.CloseEphemeralResourceResponse{Diagnostics: standIn("Closing " + req.TypeName)}, nil
}
