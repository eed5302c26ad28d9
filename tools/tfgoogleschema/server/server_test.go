package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov5"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/byoc-dev/byoc/tools/tfgoogleschema/schema"
)

// TestProvider: the schema comes from the file with cty types, nesting
// and limits; validation reports only a computed-only attribute set; planning, applying, reading and
// configuring fail naming the stand-in; a missing file is a diagnostic.
func TestProvider(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "schema.json.gz")
	str := func(s string) json.RawMessage { return json.RawMessage(s) }
	err := schema.Write(path, &schema.Provider{
		Provider: &schema.Schema{Block: &schema.Block{Attributes: map[string]*schema.Attribute{"project": {Type: str(`"string"`), Optional: true}}}},
		ResourceSchemas: map[string]*schema.Schema{"google_thing": {Block: &schema.Block{
			Attributes: map[string]*schema.Attribute{
				"name":   {Type: str(`"string"`), Required: true},
				"labels": {Type: str(`["map","string"]`), Optional: true},
				"parts":  {Type: str(`["list",["object",{"a":"number"}]]`), Computed: true},
			},
			BlockTypes: map[string]*schema.NestedBlock{"disk": {NestingMode: schema.NestingList, MinItems: 1, MaxItems: 1, Block: &schema.Block{}}},
		}}},
		DataSourceSchemas: map[string]*schema.Schema{"google_thing": {Block: &schema.Block{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := New(path)
	r, err := p.GetProviderSchema(ctx, &tfprotov5.GetProviderSchemaRequest{})
	if err != nil || len(r.Diagnostics) > 0 {
		t.Fatal(err, r.Diagnostics)
	}
	thing := r.ResourceSchemas["google_thing"].Block
	if len(thing.Attributes) != 3 || thing.Attributes[0].Name != "labels" || !thing.Attributes[0].Type.Equal(tftypes.Map{ElementType: tftypes.String}) ||
		!thing.Attributes[2].Type.Equal(tftypes.List{ElementType: tftypes.Object{AttributeTypes: map[string]tftypes.Type{"a": tftypes.Number}}}) || !thing.Attributes[2].Computed {
		t.Errorf("attributes %+v", thing.Attributes)
	}
	if b := thing.BlockTypes[0]; b.TypeName != "disk" || b.Nesting != tfprotov5.SchemaNestedBlockNestingModeList || b.MinItems != 1 || b.MaxItems != 1 {
		t.Errorf("block %+v", b)
	}
	if r.Provider.Block.Attributes[0].Name != "project" || r.DataSourceSchemas["google_thing"] == nil {
		t.Errorf("provider %+v, data sources %v", r.Provider.Block, r.DataSourceSchemas)
	}
	if m, _ := p.GetMetadata(ctx, &tfprotov5.GetMetadataRequest{}); len(m.Resources) != 1 || len(m.DataSources) != 1 {
		t.Errorf("metadata %+v", m)
	}
	config := func(parts tftypes.Value) *tfprotov5.DynamicValue {
		t.Helper()
		typ := r.ResourceSchemas["google_thing"].ValueType()
		objType := typ.(tftypes.Object)
		vals := map[string]tftypes.Value{}
		for n, at := range objType.AttributeTypes {
			vals[n] = tftypes.NewValue(at, nil)
		}
		vals["name"] = tftypes.NewValue(tftypes.String, "x")
		vals["parts"] = parts
		dv, err := tfprotov5.NewDynamicValue(typ, tftypes.NewValue(typ, vals))
		if err != nil {
			t.Fatal(err)
		}
		return &dv
	}
	partsType := thing.Attributes[2].Type
	if v, _ := p.ValidateResourceTypeConfig(ctx, &tfprotov5.ValidateResourceTypeConfigRequest{TypeName: "google_thing", Config: config(tftypes.NewValue(partsType, nil))}); len(v.Diagnostics) > 0 {
		t.Errorf("validate: %v", v.Diagnostics)
	}
	// A computed-only attribute set, even to a value not known yet.
	v, _ := p.ValidateResourceTypeConfig(ctx, &tfprotov5.ValidateResourceTypeConfigRequest{TypeName: "google_thing", Config: config(tftypes.NewValue(partsType, tftypes.UnknownValue))})
	if len(v.Diagnostics) != 1 || !strings.Contains(v.Diagnostics[0].Detail, `"parts"`) || !v.Diagnostics[0].Attribute.Equal(tftypes.NewAttributePath().WithAttributeName("parts")) {
		t.Errorf("validate with parts set: %+v", v.Diagnostics)
	}
	plan, _ := p.PlanResourceChange(ctx, &tfprotov5.PlanResourceChangeRequest{TypeName: "google_thing"})
	conf, _ := p.ConfigureProvider(ctx, &tfprotov5.ConfigureProviderRequest{})
	read, _ := p.ReadDataSource(ctx, &tfprotov5.ReadDataSourceRequest{TypeName: "google_thing"})
	for _, d := range [][]*tfprotov5.Diagnostic{plan.Diagnostics, conf.Diagnostics, read.Diagnostics} {
		if len(d) != 1 || d[0].Severity != tfprotov5.DiagnosticSeverityError || !strings.Contains(d[0].Detail, "schema-only stand-in") {
			t.Errorf("diagnostics %+v", d)
		}
	}

	missing := New(filepath.Join(t.TempDir(), "none.json.gz"))
	if r, err := missing.GetProviderSchema(ctx, &tfprotov5.GetProviderSchemaRequest{}); err != nil || len(r.Diagnostics) != 1 || !strings.Contains(r.Diagnostics[0].Detail, "none.json.gz") {
		t.Errorf("no schema file: %v %+v", err, r.Diagnostics)
	}
}
