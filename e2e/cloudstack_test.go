package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// cloudStack is one cloud's install stack for runCloudStack: the same
// scenario on every cloud, with the cloud's fake and its identities.
type cloudStack struct {
	// format is byoc install stack --format, what the agent reports, and
	// (but for cloudformation: aws) byoc app init --cloud.
	format, cloud string
	// whoami prints the job's cloud identity, one NAME=VALUE line a
	// variable, to BYOC_OUTPUTS.
	whoami string
	// setup starts the cloud's fakes with the enrolment token and the
	// customer's values (admin_email, license_key) in its secret store,
	// and returns the stack config the generated stack gives the agent of
	// install demo: provision and maintenance on, each with its own
	// identity, deprovision off.
	setup func(t *testing.T, ims, enrollToken, email, license string) *stackconfig.Config
	// issued lists the identities (role ARN, client id, service account)
	// the fake issued a token or credentials of, in order.
	issued func() []string
	// checkReport checks the agent's report of its stack (beyond the
	// inputs, which runCloudStack checks).
	checkReport func(t *testing.T, st stackStatusJSON)
	// checkWhoami checks the whoami job's output and returns what must
	// not reach the operator (the job's token, the agent's own secrets).
	checkWhoami func(t *testing.T, out string) (leaks []string)
	// refusal is what a maintenance job says once the customer turned
	// the mode off (besides the mode's parameter).
	refusal string
	// registry, when set, fronts backend (a docker-registry holding the
	// sandbox's module) with the cloud's registry fake, each mode's
	// identity allowed to push, and returns its host (the stack's
	// registry, which the agent then uses as its install registry) and
	// who the registry gave tokens to.
	registry func(t *testing.T, backend string) (host string, logins func() []string)
}

// roleIdentity is who r's jobs run as.
func roleIdentity(r stackconfig.Role) string { return r.ARN + r.ClientID + r.ServiceAccount }

// runCloudStack runs one cloud's install stack end to end, with the real
// imsd, agentd, terraform plugin and terraform: the example app (byoc app
// init --cloud, its sandbox only) and its install stack in the cloud's
// format, which names every parameter the stack config uses; agentd runs
// from that config (enrolment token, customer input and secret from the
// cloud's secret-store fake), enrols, reports the stack, provisions the
// sandbox with a token of the provision mode's identity, and runs an
// action whose environment has the maintenance mode's identity (in the
// plugins' sandbox), nothing secret reaching the operator; then the
// customer turns maintenance off and its jobs are refused naming the
// parameter to turn it back on.
func runCloudStack(t *testing.T, c cloudStack) {
	skipShort(t)
	mirror := terraformMirror(t)
	const email, license = "ops+stack@acme.example", "LIC-STACK-0042"
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)

	dir := t.TempDir()
	cli.Run(0, "app", "init", dir, "--cloud", c.cloud)
	for _, f := range []string{"components/api.toml", "components/cache.toml", "components/web.toml", "components/db.toml", "actions/migrate.toml", "actions/healthz.toml"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"installs/demo.toml":  `inputs = { domain = "demo.acme.example", tier = "large" }` + "\n",
		"actions/whoami.toml": "env = { DOMAIN = \"{{ .inputs.domain }}\" }\n[[step]]\nname = \"whoami\"\nscript = " + tomlQuote("echo domain=$DOMAIN >> $BYOC_OUTPUTS; "+c.whoami) + "\n",
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	token := cluster.Pushed{Output: cli.Run(0, "app", "push", dir)}.EnrollToken(t)
	state := t.TempDir()
	cfg := c.setup(t, ims.URL(), token, email, license)
	// The sandbox's module is pushed into a local layout (agentd module
	// push), or, for a cloud whose registry has a fake, into the
	// docker-registry behind it (under the registry's path).
	registryArgs := []string{"--install-registry", "oci:" + filepath.Join(state, "registry")}
	var registryLogins func() []string
	pushTo := registryArgs
	if c.registry != nil {
		backend := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
		cfg.Registry, registryLogins = c.registry(t, backend.Host)
		_, prefix, _ := strings.Cut(cfg.Registry, "/")
		pushTo = []string{"--install-registry", strings.TrimSuffix("http://"+backend.Host+"/"+prefix, "/")}
		// The agent uses the stack's registry: no --install-registry.
		registryArgs = nil
	}
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	if b, err := exec.Command(agentd, append([]string{"module", "push", "--state-dir", state}, append(pushTo, filepath.Join(dir, "modules", "sandbox"), "modules/sandbox:0.1.0")...)...).CombinedOutput(); err != nil {
		t.Fatalf("agentd module push: %v\n%s", err, b)
	}

	// The stack the customer deploys declares every parameter the agent
	// names (in the config and in its errors).
	out := filepath.Join(t.TempDir(), "stack")
	cli.Run(0, "install", "stack", "demo", "--format", c.format, "-o", out, "--ims-url", ims.URL())
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		out = filepath.Join(out, "main.tf")
	}
	tmpl, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	params := []string{cfg.EnrollToken.Parameter, cfg.Secrets["license_key"].Parameter, cfg.Inputs["admin_email"].Parameter}
	for _, r := range cfg.Modes {
		params = append(params, r.Parameter)
	}
	for _, p := range params {
		if p == "" || !strings.Contains(string(tmpl), p) {
			t.Errorf("the %s stack has no parameter %q", c.format, p)
		}
	}

	write := func() string {
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "stack.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	agent := cluster.StartAgent(t, ims.URL(), "", state, append([]string{"--stack-config", write(), "--terraform-providers", mirror}, registryArgs...)...)

	var st stackStatusJSON
	cluster.Eventually(t, 20*time.Second, "the agent reports its stack", func() bool {
		o, _, _ := cli.Exec("install", "get", "demo", "-o", "json")
		return json.Unmarshal([]byte(o), &st) == nil && st.Agent.Stack.Format == c.format
	})
	if st.Agent.Stack.Inputs["admin_email"] != "set" {
		t.Fatalf("reported %+v\n%s", st.Agent.Stack, agent.Output())
	}
	if c.checkReport != nil {
		c.checkReport(t, st)
	}

	// The sandbox provisions with the provision mode's identity.
	if o := cli.Run(0, "install", "provision", "demo", "--wait"); !strings.Contains(o, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s\n%s", o, agent.Output())
	}
	if got := c.issued(); !slices.Contains(got, roleIdentity(cfg.Modes["provision"])) || slices.Contains(got, roleIdentity(cfg.Modes["maintenance"])) {
		t.Fatalf("after provisioning the sandbox, tokens were issued of %v; want the provision mode's %s", got, roleIdentity(cfg.Modes["provision"]))
	}
	// The terraform type read the sandbox's module from the stack's
	// registry with the provision mode's identity, through the cloud's
	// token flow.
	if registryLogins != nil {
		if got := registryLogins(); len(got) == 0 || slices.ContainsFunc(got, func(who string) bool { return who != roleIdentity(cfg.Modes["provision"]) }) {
			t.Fatalf("the install registry issued tokens to %v; want the provision mode's %s alone", got, roleIdentity(cfg.Modes["provision"]))
		}
	}

	o := cli.Run(0, "action", "run", "demo", "whoami", "--wait")
	if got := c.issued(); got[len(got)-1] != roleIdentity(cfg.Modes["maintenance"]) {
		t.Errorf("the action ran with %s, want the maintenance mode's %s", got[len(got)-1], roleIdentity(cfg.Modes["maintenance"]))
	}
	if !strings.Contains(o, "domain=demo.acme.example") {
		t.Errorf("whoami did not get the install's input:\n%s", o)
	}
	for _, leak := range append(c.checkWhoami(t, o), email, license) {
		if leak != "" && strings.Contains(o, leak) {
			t.Errorf("a secret reached the operator: %q", leak)
		}
	}
	agent.Stop()

	// The customer turns maintenance off (the stack's toggle removes the
	// identity and writes enabled=false): its jobs fail naming the
	// parameter.
	m := cfg.Modes["maintenance"]
	cfg.Modes["maintenance"] = stackconfig.Role{Enabled: false, Name: m.Name, Parameter: m.Parameter}
	cluster.StartAgent(t, ims.URL(), "", state, append([]string{"--stack-config", write(), "--terraform-providers", mirror}, registryArgs...)...)
	o, _, _ = cli.Exec("action", "run", "demo", "whoami", "--wait")
	if !strings.Contains(o, m.Parameter) || !strings.Contains(o, "turned off in this install's stack") || !strings.Contains(o, c.refusal) {
		t.Fatalf("action run with maintenance off (want %s and %q):\n%s", m.Parameter, c.refusal, o)
	}
}

// tomlQuote quotes s as a TOML basic string.
func tomlQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
