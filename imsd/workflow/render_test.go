package workflow

import (
	"encoding/json"
	"fmt"
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

// A customer-provided input is the agent's to fill in (it reads the value
// from the install stack): it stays a reference in the job's config, listed
// under customer_inputs; the vendor's inputs are rendered as before.
func TestCustomerInputsStayReferences(t *testing.T) {
	files := diamond(map[string]string{
		"inputs.toml": `[[input]]
name = "size"
type = "number"
default = 1

[[input]]
name = "admin_email"
provided_by = "customer"
sensitive = true
required = true
`,
		"components/a.toml": `type = "action"
[config]
env = { ADMIN = "to {{ .inputs.admin_email }}", SIZE = "{{ .inputs.size }}" }
steps = [{ script = "echo $ADMIN" }]
`,
		"components/b.toml": "", "components/c.toml": "", "components/d.toml": "",
	})
	r := newRig(t, files, store.InstallSettings{Parallelism: 4})
	ctx := t.Context()
	id := r.queue(Provision, 1, false)
	must(t, r.e.Advance(ctx, id))
	j, err := r.st.GetJob(ctx, r.steps(id)["a"].JobID)
	must(t, err)
	var cfg map[string]any
	must(t, json.Unmarshal(j.Config, &cfg))
	env := cfg["env"].(map[string]any)
	if env["ADMIN"] != "to {{ .inputs.admin_email }}" || env["SIZE"] != "1" {
		t.Errorf("env = %v", env)
	}
	if got, _ := json.Marshal(cfg[CustomerInputsKey]); string(got) != `["admin_email"]` {
		t.Errorf("customer_inputs = %s", got)
	}
}

// A field the type's schema marks sensitive is listed for the agent to
// redact (and for every read of the job's config to mask), like a
// sensitive input's value (issue 29 item 5: only plans were masked).
func TestSchemaSensitiveFieldsListed(t *testing.T) {
	files := diamond(map[string]string{
		"components/hello.toml": `type = "greeting"
[config]
name = "ada"
api_key = "k-0123456789"
`,
	})
	r := newRig(t, files, store.InstallSettings{Parallelism: 4})
	ctx := t.Context()
	_, _, err := r.st.PutPluginType(ctx, store.PluginType{Type: "greeting", Version: "1", Description: "{}", RegisteredAt: r.now(),
		ConfigSchema: `{"type": "object", "properties": {"name": {"type": "string"}, "api_key": {"type": "string", "sensitive": true}}}`})
	must(t, err)
	id := r.queue(Provision, 1, false)
	must(t, r.e.Advance(ctx, id))
	j, err := r.st.GetJob(ctx, r.steps(id)["hello"].JobID)
	must(t, err)
	var cfg map[string]any
	must(t, json.Unmarshal(j.Config, &cfg))
	if got := fmt.Sprint(cfg[SensitiveKey]); got != "[k-0123456789]" {
		t.Errorf("sensitive list %s, want the api_key's value", got)
	}
}
