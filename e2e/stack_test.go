package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/stackconfig"
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

// The CloudFormation stack's agent, as the real binary: its enrolment
// token and the customer's inputs and secret come from Secrets Manager,
// and each job runs with its mode's role, assumed through STS; both are
// local fakes (agentd/stack/awsfake) reached by the real aws-sdk-go-v2
// clients through the stack config's endpoints. A mode turned off fails
// its jobs naming the stack parameter.
func TestCloudFormationStackAgent(t *testing.T) {
	const (
		agentKey   = "AKIAE2EAGENTKEY01"
		maintARN   = "arn:aws:iam::123456789012:role/demo-MaintenanceRole-X1"
		provARN    = "arn:aws:iam::123456789012:role/demo-ProvisionRole-X2"
		tokenARN   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:byoc/demo/enrollment"
		emailARN   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:demo-InputAdminEmailValue"
		licenseARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:demo-SecretLicenseKeyValue"
	)
	var fake *awsfake.AWS
	runCloudStack(t, cloudStack{
		format: "cloudformation", cloud: "aws",
		whoami: "echo key=$AWS_ACCESS_KEY_ID >> $BYOC_OUTPUTS; echo secret=$AWS_SECRET_ACCESS_KEY >> $BYOC_OUTPUTS; echo role=$BYOC_ROLE_ARN >> $BYOC_OUTPUTS",
		setup: func(t *testing.T, ims, enrollToken, email, license string) *stackconfig.Config {
			fake = awsfake.New(t)
			fake.PutSecret(tokenARN, enrollToken)
			fake.PutSecret(emailARN, email)
			fake.PutSecret(licenseARN, license)
			fake.AddRole(maintARN, agentKey)
			fake.AddRole(provARN, agentKey)
			t.Setenv("AWS_ACCESS_KEY_ID", agentKey)
			src := func(arn, param string) *stackconfig.Source {
				return &stackconfig.Source{SecretARN: arn, Parameter: param}
			}
			return &stackconfig.Config{Version: 1, Format: "cloudformation", Stack: "demo-byoc", Install: "demo", IMS: ims, Region: "eu-west-1",
				EnrollToken: *src(tokenARN, "EnrollmentTokenSecretArn"),
				Modes: map[string]stackconfig.Role{
					"provision":   {Enabled: true, ARN: provARN, Name: "ProvisionRole", Parameter: "EnableProvision"},
					"maintenance": {Enabled: true, ARN: maintARN, Name: "MaintenanceRole", Parameter: "EnableMaintenance"},
					"deprovision": {Enabled: false, Name: "DeprovisionRole", Parameter: "EnableDeprovision"},
				},
				Inputs: map[string]stackconfig.Input{
					"admin_email": {Sensitive: true, Parameter: "InputAdminEmail", From: src(emailARN, "InputAdminEmail")},
				},
				Secrets:   map[string]stackconfig.Source{"license_key": *src(licenseARN, "SecretLicenseKey")},
				Outputs:   map[string]string{"RegistryUri": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/byoc/demo"},
				Endpoints: map[string]string{"sts": fake.STS.URL, "secretsmanager": fake.SecretsManager.URL},
				// As the CloudFormation stack writes them (stackconfig.SessionTags).
				SessionTags: map[string]string{"byoc:install": "demo", "byoc:label:customer": "acme"},
			}
		},
		checkReport: func(t *testing.T, st stackStatusJSON) {
			if st.Agent.Stack.Outputs["RegistryUri"] == "" {
				t.Errorf("reported outputs %v, want RegistryUri", st.Agent.Stack.Outputs)
			}
		},
		issued: func() (ids []string) {
			for _, is := range fake.Issued() {
				ids = append(ids, is.RoleARN)
			}
			return ids
		},
		checkWhoami: func(t *testing.T, out string) []string {
			issued := fake.Issued()
			last := issued[len(issued)-1]
			for _, is := range issued {
				if is.Tags["byoc:install"] != "demo" || is.Tags["byoc:label:customer"] != "acme" {
					t.Errorf("a job's session carries tags %v, want the install's", is.Tags)
				}
			}
			if !strings.Contains(out, "key="+last.AccessKeyID) || !strings.Contains(out, "secret=***") || !strings.Contains(out, "role="+maintARN) {
				t.Fatalf("whoami:\n%s", out)
			}
			// The agent's calls were signed with its own key; the job's
			// session names the job.
			for _, c := range fake.Calls() {
				if c.AccessKeyID != agentKey {
					t.Errorf("call %s.%s signed by %q", c.Service, c.Action, c.AccessKeyID)
				}
			}
			if !strings.HasPrefix(last.SessionName, "byoc-job_") {
				t.Errorf("session name %q", last.SessionName)
			}
			return []string{last.SecretAccessKey, last.SessionToken, agentKey, "agent-secret-must-not-leak"}
		},
		refusal: "update the install stack with parameter EnableMaintenance=true",
	})
}
