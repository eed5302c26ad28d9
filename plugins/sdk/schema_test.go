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
			[]string{"name: got number, want string", "replicas: got number, want integer"}},
		{"bounds", map[string]any{"name": "", "replicas": 0, "steps": []any{}},
			[]string{"name: minLength", "replicas: minimum"}},
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

func TestValidateConfigBadSchema(t *testing.T) {
	for _, s := range []string{`{`, `{"type": 3}`, `{"$ref": "https://example.com/s.json"}`} {
		if _, err := sdk.ValidateConfig(s, nil); err == nil {
			t.Errorf("schema %s accepted", s)
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

func (p schemaPlugin) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	*p.validated = true
	return &sdk.ValidateResponse{}, nil
}

func (p schemaPlugin) Apply(context.Context, *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	*p.applied = true
	return &sdk.ApplyResponse{}, nil
}

// The SDK checks every config against the declared schema before the
// plugin's own code sees it, in Validate and in every operation.
func TestSchemaEnforcedBySDK(t *testing.T) {
	var validated, applied bool
	c := sdktest.Start(t, schemaPlugin{validated: &validated, applied: &applied})
	v, err := c.Validate(t.Context(), map[string]any{"name": "a", "steps": []any{map[string]any{}}})
	if err != nil || len(v.Diagnostics) != 1 || v.Diagnostics[0].Field != "steps[0].script" || validated {
		t.Errorf("Validate = %+v, %v (plugin's Validate called: %v)", v, err, validated)
	}
	res, err := c.Run(t.Context(), sdk.OpApply, &sdk.RunRequest{Config: map[string]any{"name": 1}}, nil)
	if err != nil || !strings.Contains(res.Error, "invalid config: name: got number, want string; steps: is required") || applied {
		t.Errorf("apply = %+v, %v (plugin's Apply called: %v)", res, err, applied)
	}
	d, err := c.Describe(t.Context())
	if err != nil || d.ConfigSchema != testSchema {
		t.Errorf("Describe = %+v, %v", d, err)
	}
}
