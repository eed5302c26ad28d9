package sdk_test

import (
	"context"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

const testSchema = `{
  "type": "object",
  "required": ["name", "steps"],
  "additionalProperties": false,
  "properties": {
    "name": {"type": "string", "minLength": 1},
    "replicas": {"type": "integer", "minimum": 1},
    "steps": {"type": "array", "items": {
      "type": "object", "required": ["script"], "additionalProperties": false,
      "properties": {"script": {"type": "string"}}
    }}
  }
}`

func TestValidateConfig(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]any
		want   []string
	}{
		{"valid", map[string]any{"name": "a", "replicas": 2, "steps": []any{map[string]any{"script": "x"}}}, nil},
		{"missing fields", map[string]any{}, []string{"name: is required", "steps: is required"}},
		{"nested", map[string]any{"name": "a", "steps": []any{map[string]any{"scrpt": "x"}}},
			[]string{"steps[0].script: is required", "steps[0].scrpt: unknown field"}},
		{"types", map[string]any{"name": 3, "replicas": 0.5, "steps": []any{}},
			[]string{"name: got integer, want string", "replicas: got number, want integer"}},
		{"bounds", map[string]any{"name": "", "replicas": 0, "steps": []any{}},
			[]string{"name: must not be empty", "replicas: must be at least 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diags, err := sdk.ValidateConfig(testSchema, tt.config)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range diags {
				got = append(got, d.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("diagnostics = %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.want[i]) {
					t.Errorf("diagnostic %d = %q, want it to contain %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// The keywords beyond the basics, each with a value that passes and one
// that fails with a message naming the field.
func TestValidateConfigKeywords(t *testing.T) {
	const schema = `{
	  "$defs": {"port": {"type": "integer", "minimum": 1, "maximum": 65535}},
	  "type": "object",
	  "properties": {
	    "mode": {"enum": ["fast", "safe"]},
	    "kind": {"const": "web"},
	    "port": {"$ref": "#/$defs/port"},
	    "tags": {"type": "array", "uniqueItems": true, "maxItems": 3, "items": {"type": "string", "pattern": "^[a-z]+$"}},
	    "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
	    "size": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+Gi$"}]},
	    "one": {"oneOf": [{"type": "number", "multipleOf": 2}, {"type": "number", "multipleOf": 3}]},
	    "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
	    "name": {"type": "string", "maxLength": 5, "not": {"const": "admin"}},
	    "legacy": false
	  }
	}`
	ok := map[string]any{"mode": "fast", "kind": "web", "port": 443, "tags": []any{"a", "b"}, "labels": map[string]any{"x": "y"},
		"size": "10Gi", "one": 4, "ratio": 0.5, "name": "bob"}
	if d, err := sdk.ValidateConfig(schema, ok); err != nil || d != nil {
		t.Fatalf("valid config: %v, %v", d, err)
	}
	bad := map[string]any{"mode": "slow", "kind": "db", "port": 70000, "tags": []any{"a", "a", "B", "c"}, "labels": map[string]any{"x": 1, "y": "", "z": ""},
		"size": "10G", "one": 6, "ratio": 1, "name": "admin", "legacy": true}
	d, err := sdk.ValidateConfig(schema, bad)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range d {
		got = append(got, x.String())
	}
	want := []string{
		`kind: must be "web"`,
		"labels: must have at most 2 fields",
		"labels.x: got integer, want string",
		"legacy: is not allowed",
		`mode: must be one of "fast", "safe"`,
		"name: matches a form that is not allowed (not)",
		"one: must match exactly one of the allowed forms (oneOf), matches 2",
		"port: must be at most 65535",
		"ratio: must be less than 1",
		"size: matches none of the allowed forms (anyOf)",
		"tags: must have at most 3 items",
		"tags: items 0 and 1 are equal; items must be unique",
		"tags[2]: is not in the required form",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidateConfigBadSchema(t *testing.T) {
	for s, want := range map[string]string{
		`{`:                                      "not JSON",
		`{"type": 3}`:                            "type: must be a type name",
		`{"type": "text"}`:                       `unknown type "text"`,
		`{"$ref": "https://example.com/s.json"}`: "a reference into the schema's own $defs",
		`{"$ref": "#/$defs/nope"}`:               "no such definition",
		`{"properties": {"a": {"unevaluatedProperties": {}}}}`: `schema at /properties/a: keyword "unevaluatedProperties" is not supported`,
		`{"patternProperties": {"(": {}}}`:                     `patternProperties: "(": error parsing regexp`,
		`{"dependentRequired": {"a": "b"}}`:                    `dependentRequired.a: must be an array of property names`,
		`{"sensitive": "yes"}`:                                 `sensitive: must be a boolean`,
		`{"pattern": "("}`:                                     "pattern: error parsing regexp",
		`{"minLength": -1}`:                                    "minLength: must be a non-negative integer",
	} {
		if _, err := sdk.ValidateConfig(s, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("schema %s: error %v, want %q", s, err, want)
		}
	}
	if d, err := sdk.ValidateConfig("", map[string]any{"x": 1}); err != nil || d != nil {
		t.Errorf("empty schema: %v, %v", d, err)
	}
}

// schemaPlugin declares testSchema and records whether its own Validate
// and Apply were reached.
type schemaPlugin struct {
	fake
	validated, applied *bool
}

func (schemaPlugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "schema", ConfigSchema: testSchema}, nil
}

func (p schemaPlugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	*p.validated = true
	if req.Config["name"] == "admin" {
		return &sdk.ValidateResponse{Diagnostics: []sdk.Diagnostic{{Field: "name", Message: "is reserved"},
			{Field: "name", Message: "will be renamed", Severity: sdk.SeverityWarning}}}, nil
	}
	return &sdk.ValidateResponse{}, nil
}

func (p schemaPlugin) Apply(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	*p.applied = true
	return &sdk.ApplyResponse{}, nil
}

// The SDK checks every config against the declared schema before the
// plugin's operations see it; Validate reports the schema's problems and
// the plugin's own in one round (issue 29 item 7: they came in two),
// warnings with their severity.
func TestSchemaEnforcedBySDK(t *testing.T) {
	var validated, applied bool
	c := sdktest.Start(t, schemaPlugin{validated: &validated, applied: &applied})
	v, err := c.Validate(t.Context(), map[string]any{"name": "admin", "steps": []any{map[string]any{}}})
	if err != nil || len(v.Diagnostics) != 3 || v.Diagnostics[0].Field != "steps[0].script" || !validated ||
		v.Diagnostics[1].String() != "name: is reserved" || !v.Diagnostics[2].IsWarning() {
		t.Errorf("Validate = %+v, %v (plugin's Validate called: %v)", v, err, validated)
	}
	res, err := c.Run(t.Context(), sdk.OpApply, &sdk.RunRequest{Config: map[string]any{"name": 1}}, nil)
	if err != nil || !strings.Contains(res.Error, "invalid config: name: got integer, want string; steps: is required") || applied {
		t.Errorf("apply = %+v, %v (plugin's Apply called: %v)", res, err, applied)
	}
	d, err := c.Describe(t.Context())
	if err != nil || d.ConfigSchema != testSchema {
		t.Errorf("Describe = %+v, %v", d, err)
	}
}
