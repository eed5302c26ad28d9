package workflow

import (
	"encoding/json"
	"testing"

	"github.com/byoc-dev/byoc/imsd/store"
)

// A template inside a string renders to a string: a number input in an
// action component's env (the action type's schema wants strings there)
// and in a type without a schema (helm values, as the example app's
// api.toml has it) reaches the job as text. Where a registered type's
// schema wants an integer, a whole-value reference keeps the number.
func TestTemplateInStringRendersToString(t *testing.T) {
	files := diamond(map[string]string{
		"components/a.toml": `type = "action"
[config]
env = { RET = "{{ .inputs.size }}" }
steps = [{ script = "echo $RET" }]
`,
		"components/b.toml": "", "components/c.toml": "", "components/d.toml": "",
		"components/api.toml": `type = "helm"
[config]
release = "api"
chart = "charts/api@sha256:5b1e6b1f3c0f4e2d9a8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddcc"
values = { retention_days = "{{ .inputs.size }}" }
`,
		"components/hello.toml": `type = "greeting"
[config]
replicas = "{{ .inputs.size }}"
label = "{{ .inputs.size }}"
`,
	})
	r := newRig(t, files, store.InstallSettings{Parallelism: 4})
	ctx := t.Context()
	_, _, err := r.st.PutPluginType(ctx, store.PluginType{Type: "greeting", Version: "1", Description: "{}", RegisteredAt: r.now(),
		ConfigSchema: `{"type": "object", "properties": {"replicas": {"type": "integer"}, "label": {"type": "string"}}}`})
	must(t, err)
	id := r.queue(Provision, 1, false)
	must(t, r.e.Advance(ctx, id))
	configs := map[string]map[string]any{}
	for name, s := range r.steps(id) {
		if s.JobID == "" {
			t.Fatalf("step %s has no job", name)
		}
		j, err := r.st.GetJob(ctx, s.JobID)
		must(t, err)
		var cfg map[string]any
		must(t, json.Unmarshal(j.Config, &cfg))
		configs[name] = cfg
	}
	if v := configs["a"]["env"].(map[string]any)["RET"]; v != "1" {
		t.Errorf("action env RET = %#v, want the string \"1\"", v)
	}
	if v := configs["api"]["values"].(map[string]any)["retention_days"]; v != "1" {
		t.Errorf("helm values.retention_days = %#v, want the string \"1\"", v)
	}
	if v := configs["hello"]["replicas"]; v != 1.0 {
		t.Errorf("greeting replicas = %#v, want the number 1 (its schema wants an integer)", v)
	}
	if v := configs["hello"]["label"]; v != "1" {
		t.Errorf("greeting label = %#v, want the string \"1\"", v)
	}
}
