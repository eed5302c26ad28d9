package typeschema_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/typeschema"
	"github.com/byoc-dev/byoc/schema/app/diag"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// greetingSchema is a third-party type's schema, as registered.
const greetingSchema = `{
  "type": "object",
  "required": ["name"],
  "additionalProperties": false,
  "properties": {
    "name": {"type": "string", "minLength": 1},
    "replicas": {"type": "integer", "minimum": 1},
    "loud": {"type": "boolean"},
    "mode": {"enum": ["plain", "fancy"]}
  }
}`

const inputs = `
[[input]]
name = "replicas"
type = "number"
default = 2
[[input]]
name = "mode"
required = true
`

// The config checks through the app config validator: every problem at once, each with
// its file, line, key under config and hint; references pass where the
// schema wants another type.
func TestConfigChecks(t *testing.T) {
	greeting, err := configschema.Compile(greetingSchema)
	if err != nil {
		t.Fatal(err)
	}
	opts := validate.Options{
		Types:    typeschema.Types(map[string]*configschema.Schema{"greeting": greeting, "anything": nil}),
		TypeHint: "register a third-party type with byoc plugin register FILE",
	}
	tests := []struct {
		name  string
		files map[string]string
		want  []string // the diagnostics, as printed
	}{
		{"valid with references", map[string]string{
			"components/hello.toml": `type = "greeting"
[config]
name = "{{ .install.name }}"
replicas = "{{ .inputs.replicas }}"
loud = "{{ .inputs.replicas }}"
mode = "{{ .inputs.mode }}"
`,
			"components/job.toml": `type = "action"
[config]
shell = "{{ .inputs.mode }}"
sandbox = { memory_mb = "{{ .inputs.replicas }}" }
[[config.steps]]
script = "echo {{ .inputs.mode }}"
`,
			"components/free.toml":  "type = \"anything\"\nconfig = { whatever = [1, 2] }\n",
			"components/chart.toml": "type = \"helm\"\n[config]\nrelease = \"{{ .install.name }}\"\nchart = \"{{ .inputs.mode }}\"\nvalues = { replicas = \"{{ .inputs.replicas }}\" }\n",
		}, nil},
		{"helm fields", map[string]string{
			"components/chart.toml": "type = \"helm\"\n[config]\nchart = 3\nwait = \"yes\"\n",
		}, []string{
			`components/chart.toml:2: config.release: is required`,
			`components/chart.toml:3: config.chart: got integer, want string`,
			`components/chart.toml:4: config.wait: got string, want boolean`,
		}},
		{"action fields", map[string]string{
			"components/job.toml": `type = "action"

[config]
shell = 3
sandbox = { memory_mb = 1, network = "yes" }

[[config.steps]]
name = "migrate"
scrpt = "make migrate"

[[config.steps]]
script = ""
`,
		}, []string{
			`components/job.toml:4: config.shell: got integer, want string`,
			`components/job.toml:5: config.sandbox.memory_mb: must be at least 16`,
			`components/job.toml:5: config.sandbox.network: got string, want boolean`,
			`components/job.toml:9: config.steps[0].scrpt: unknown field (did you mean "script"?)`,
			`components/job.toml:12: config.steps[1].script: must not be empty`,
		}},
		{"missing config is reported at the type", map[string]string{
			"components/job.toml": "description = \"x\"\ntype = \"action\"\n",
		}, []string{
			`components/job.toml:2: config.steps: is required`,
		}},
		{"third-party type", map[string]string{
			"components/hello.toml": `type = "greeting"
config.replicas = "3"
config.loud = true
config.mode = "shiny"
config.nme = "ada"
`,
		}, []string{
			`components/hello.toml:2: config.replicas: got string, want integer`,
			`components/hello.toml:4: config.mode: must be one of "plain", "fancy"`,
			`components/hello.toml:5: config.nme: unknown field (did you mean "name"?)`,
		}},
		{"a misspelt field is what a missing required one meant; a far one keeps the list", map[string]string{
			"components/chart.toml": "type = \"helm\"\n[config]\nchart_dir = \"c\"\nreleese = \"web\"\nzzz = 1\n",
		}, []string{
			`components/chart.toml:4: config.releese: unknown field (did you mean "release"?)`,
			`components/chart.toml:5: config.zzz: unknown field (known fields: chart, chart_dir, create_namespace, history_max, manifests, manifests_base64, namespace, release, rollback_on_failure, timeout, values, wait)`,
		}},
		{"sandbox", map[string]string{
			"sandbox.toml": "type = \"action\"\n[config]\nsteps = \"make\"\n",
		}, []string{
			`sandbox.toml:3: config.steps: got string, want array`,
		}},
		{"unknown type", map[string]string{
			"components/hello.toml": "type = \"greting\"\n",
			"components/x.toml":     "type = \"kustomize\"\n",
		}, []string{
			`components/hello.toml:1: type: no component type "greting" (did you mean "greeting"? known types: action, anything, greeting, helm, image, terraform; register a third-party type with byoc plugin register FILE)`,
			`components/x.toml:1: type: no component type "kustomize" (known types: action, anything, greeting, helm, image, terraform; register a third-party type with byoc plugin register FILE)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string][]byte{"app.toml": []byte("name = \"acme\"\n"), "inputs.toml": []byte(inputs)}
			for p, c := range tt.files {
				files[p] = []byte(c)
			}
			_, err := load.Parse(files, opts)
			var got []string
			var cerr *diag.Error
			if errors.As(err, &cerr) {
				for _, d := range cerr.Diagnostics {
					got = append(got, d.String())
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// AnyType accepts types it does not know and checks those it does.
func TestAnyType(t *testing.T) {
	files := map[string][]byte{
		"app.toml":            []byte("name = \"acme\"\n"),
		"components/a.toml":   []byte("type = \"greeting\"\nconfig.x = 1\n"),
		"components/job.toml": []byte("type = \"action\"\n"),
	}
	_, err := load.Parse(files, validate.Options{Types: typeschema.Types(nil), AnyType: true})
	if err == nil || !strings.Contains(err.Error(), "config.steps: is required") || strings.Contains(err.Error(), "greeting") {
		t.Fatalf("Parse = %v, want only the action's error", err)
	}
}

func TestBuiltins(t *testing.T) {
	if got := strings.Join(typeschema.BuiltinNames(), ","); got != "action,helm,image,terraform" {
		t.Errorf("BuiltinNames = %s", got)
	}
	for _, name := range typeschema.BuiltinNames() {
		s, ok := typeschema.BuiltinSchema(name)
		if !ok || s == "" {
			t.Errorf("BuiltinSchema(%s) = %q, %v", name, s, ok)
		}
	}
	if typeschema.IsBuiltin("greeting") {
		t.Error("greeting is built in")
	}
	// Types compiles the built-in schemas (it panics on a broken one).
	if typeschema.Types(nil)["action"] == nil || typeschema.Types(nil)["terraform"] == nil {
		t.Error("the action or terraform type has no check")
	}
}

func TestParseDescription(t *testing.T) {
	good := `{
  "type": "greeting",
  "version": "0.1.0",
  "protocol": "1.1",
  "protocol_versions": ["1.1"],
  "capabilities": [],
  "config_schema": ` + greetingSchema + `,
  "future_field": {"ignored": true}
}`
	d, s, err := typeschema.ParseDescription([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != "greeting" || d.Version != "0.1.0" || d.Protocol != "1.1" || s == nil || strings.Contains(string(d.ConfigSchema), "\n") {
		t.Fatalf("ParseDescription = %+v, %v", d, s)
	}
	if d, s, err := typeschema.ParseDescription([]byte(`{"type": "free", "version": "1", "protocol": "1.0"}`)); err != nil || s != nil || d.ConfigSchema != nil {
		t.Fatalf("without a schema: %+v, %v, %v", d, s, err)
	}
	for _, tt := range []struct{ in, want string }{
		{`not json`, "is not the JSON that byoc-plugin-TYPE describe prints"},
		{`{"version": "1", "protocol": "1.1"}`, "type: is required"},
		{`{"type": "Greeting", "version": "1", "protocol": "1.1"}`, `type: "Greeting" is not a valid type name`},
		{`{"type": "g", "protocol": "1.1"}`, "version: is required"},
		{`{"type": "g", "version": "1", "protocol": "one"}`, `protocol: "one" is not a protocol version`},
		{`{"type": "g", "version": "1", "protocol": "1.1", "config_schema": {"properties": {"a": {"format": "x", "if": {}}}}}`,
			`config_schema: schema at /properties/a: keyword "if" is not supported`},
		{`{"type": "g", "version": "1", "protocol": "1.1", "outputs_schema": {"type": "thing"}}`, `outputs_schema: schema at the root: type: unknown type "thing"`},
		{`{"type": "g", "version": "1", "protocol": "1.1"} {}`, "more than one JSON value"},
		{`{"type": "g", "version": "1", "protocol": "1.1", "config_schema": {"properties": {"customer_inputs": {}}}}`,
			`config_schema: properties: "customer_inputs" is a reserved config key`},
		{`{"type": "g", "version": "1", "protocol": "1.1", "config_schema": {"allOf": [{"required": ["secrets"]}]}}`,
			`config_schema: allOf[0].required: "secrets" is a reserved config key`},
	} {
		if _, _, err := typeschema.ParseDescription([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseDescription(%s) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

// A description of a protocol major no agent speaks is refused; one that
// also speaks a known major, or a newer minor of it, is not.
func TestCheckProtocol(t *testing.T) {
	for _, tt := range []struct {
		d    typeschema.Description
		want string
	}{
		{typeschema.Description{Protocol: "1.1", ProtocolVersions: []string{"1.1"}}, ""},
		{typeschema.Description{Protocol: "1.9"}, ""},
		{typeschema.Description{Protocol: "2.0", ProtocolVersions: []string{"2.0", "1.4"}}, ""},
		{typeschema.Description{Protocol: "2.0", ProtocolVersions: []string{"2.0"}},
			"protocol: the plugin speaks byoc plugin protocol 2.0, but agents speak 1.x: no agent could run it; build the plugin against a byoc SDK of protocol 1.x"},
	} {
		err := typeschema.CheckProtocol(tt.d)
		if (tt.want == "") != (err == nil) || (err != nil && err.Error() != tt.want) {
			t.Errorf("CheckProtocol(%+v) = %v, want %q", tt.d, err, tt.want)
		}
	}
	// The agents' majors are the SDK's.
	if !slices.Equal(typeschema.AgentProtocolMajors, []int{sdk.ProtocolMajor}) {
		t.Errorf("AgentProtocolMajors = %v, the SDK speaks %d", typeschema.AgentProtocolMajors, sdk.ProtocolMajor)
	}
}
