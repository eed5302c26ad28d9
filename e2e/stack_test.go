package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// stackApp has two customer-provided inputs (one sensitive), a secret, and
// an action that uses all three.
var stackApp = map[string]string{
	"app.toml": "name = \"crm\"\n",
	"inputs.toml": `[[input]]
name = "team"
provided_by = "customer"
required = true

[[input]]
name = "admin_email"
provided_by = "customer"
sensitive = true
required = true

[[input]]
name = "size"
default = "s"
`,
	"secrets.toml": "[[secret]]\nname = \"license_key\"\n",
	"actions/hello.toml": `env = { TEAM = "{{ .inputs.team }}", ADMIN = "{{ .inputs.admin_email }}", SIZE = "{{ .inputs.size }}" }
[[step]]
name = "hello"
script = "echo \"hello=$TEAM/$ADMIN/$SIZE\" >> $BYOC_OUTPUTS"
`,
	"installs/acme.toml": "",
}

type stackStatusJSON struct {
	Agent struct {
		Stack struct {
			Format  string            `json:"format"`
			Inputs  map[string]string `json:"inputs"`
			Outputs map[string]string `json:"outputs"`
		} `json:"stack"`
	} `json:"agent"`
	Inputs map[string]string `json:"inputs"`
}

// The local install stack end to end: byoc install stack --format local
// writes it, agentd runs from it (enrolment token, customer inputs and
// secrets from its files), reports the customer inputs to imsd as "set"
// (sensitive) or by value, and a job gets their values from the agent;
// an app push does not wipe them; a mode the stack turned off fails its
// jobs naming the parameter.
func TestLocalInstallStack(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run
	pushed := cli.PushApp(stackApp)
	token := pushed.EnrollToken(t)

	const email, license = "ops+crm@acme.example", "LIC-77-secret"
	dir := filepath.Join(t.TempDir(), "stack-acme")
	out := run(0, "install", "stack", "acme", "--format", "local", "-o", dir, "--ims-url", ims.URL(),
		"--param", "InputTeam=platform", "--param", "InputAdminEmail="+email, "--param", "SecretLicenseKey="+license)
	if !strings.Contains(out, "enroll.token") {
		t.Fatalf("install stack:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stack.json")); strings.Contains(string(b), email) || strings.Contains(string(b), license) {
		t.Fatalf("a sensitive value is in stack.json:\n%s", b)
	}
	if err := os.WriteFile(filepath.Join(dir, "enroll.token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	agent := cluster.StartAgent(t, ims.URL(), "", state, "--stack-config", filepath.Join(dir, "stack.json"))

	var st stackStatusJSON
	cluster.Eventually(t, 20*time.Second, "the agent reports its stack", func() bool {
		o, _, _ := cli.Exec("install", "get", "acme", "-o", "json")
		return json.Unmarshal([]byte(o), &st) == nil && st.Agent.Stack.Format == "local"
	})
	if st.Agent.Stack.Inputs["team"] != "platform" || st.Agent.Stack.Inputs["admin_email"] != "set" || len(st.Agent.Stack.Inputs) != 2 {
		t.Fatalf("reported inputs %v, want team=platform and admin_email=set\n%s", st.Agent.Stack.Inputs, agent.Output())
	}
	if o := run(0, "install", "get", "acme"); !strings.Contains(o, "admin_email=set, team=platform") || strings.Contains(o, email) {
		t.Fatalf("install get:\n%s", o)
	}

	hello := func() string {
		t.Helper()
		return run(0, "action", "run", "acme", "hello", "--wait")
	}
	out = hello()
	if !strings.Contains(out, "hello=platform/***/s") || strings.Contains(out, email) {
		t.Fatalf("action run:\n%s", out)
	}

	// The vendor cannot set a customer's input.
	if o, e, code := cli.Exec("install", "update", "acme", "--input", "team=sales"); code == 0 || !strings.Contains(o+e, `input "team" is provided by the customer`) || !strings.Contains(o+e, "InputTeam") {
		t.Fatalf("install update of a customer input: exit %d\n%s%s", code, o, e)
	}

	// A new revision: the customer's values stay where they are.
	changed := map[string]string{}
	for k, v := range stackApp {
		changed[k] = v
	}
	changed["inputs.toml"] = strings.Replace(stackApp["inputs.toml"], `default = "s"`, `default = "m"`, 1)
	cli.PushApp(changed)
	o, _, _ := cli.Exec("install", "get", "acme", "-o", "json")
	st = stackStatusJSON{}
	if err := json.Unmarshal([]byte(o), &st); err != nil || st.Agent.Stack.Inputs["team"] != "platform" || st.Agent.Stack.Inputs["admin_email"] != "set" {
		t.Fatalf("after app push: %v\n%s", err, o)
	}
	cluster.Eventually(t, 20*time.Second, "the update workflow ends", func() bool {
		o, _, _ := cli.Exec("workflow", "list", "acme")
		return !strings.Contains(o, "running") && !strings.Contains(o, "pending")
	})
	if out := hello(); !strings.Contains(out, "hello=platform/***/m") {
		t.Fatalf("action run after push:\n%s", out)
	}
	agent.Stop()

	// The stack turns maintenance's role off: the job fails naming it.
	b, err := os.ReadFile(filepath.Join(dir, "stack.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["modes"].(map[string]any)["maintenance"].(map[string]any)["enabled"] = false
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "stack.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, ims.URL(), "", state, "--stack-config", filepath.Join(dir, "stack.json"))
	out, _, _ = cli.Exec("action", "run", "acme", "hello", "--wait")
	if !strings.Contains(out, "EnableMaintenance") || !strings.Contains(out, "turned off in this install's stack") {
		t.Fatalf("action run with maintenance's role off:\n%s", out)
	}
}
