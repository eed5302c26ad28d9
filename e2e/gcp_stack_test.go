package e2e

import (
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/stack/gcpfake"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// A Google Cloud stack's agent, as the real binary: its enrolment token
// and the customer's inputs and secret come from Secret Manager, and
// each job gets a token of its mode's service account, impersonated
// through the IAM Credentials API with the agent's metadata-server
// token; all three are agentd/stack/gcpfake, reached by the real
// clients (the metadata server through GCE_METADATA_HOST, the APIs over
// TLS trusted through SSL_CERT_FILE). A mode turned off fails its jobs
// naming the Terraform variable.
func TestGCPStackAgent(t *testing.T) {
	skipShort(t)
	const email, license = "ops+gcp@acme.example", "LIC-GCP-0042"
	const project = "acme-prod-1"
	const agentSA, maintSA = "byoc-acme-agent@acme-prod-1.iam.gserviceaccount.com", "byoc-acme-maintenance@acme-prod-1.iam.gserviceaccount.com"
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	app := map[string]string{}
	for k, v := range stackApp {
		app[k] = v
	}
	app["actions/whoami.toml"] = `[[step]]
name = "whoami"
script = "echo sa=$BYOC_GCP_SERVICE_ACCOUNT >> $BYOC_OUTPUTS; echo token=$GOOGLE_OAUTH_ACCESS_TOKEN >> $BYOC_OUTPUTS; echo project=$GOOGLE_CLOUD_PROJECT >> $BYOC_OUTPUTS; echo md=x$GCE_METADATA_HOST >> $BYOC_OUTPUTS"
`
	pushed := cli.PushApp(app)

	fake := gcpfake.New(t, agentSA)
	fake.PutSecret(project, "byoc-acme-enrollment-token", pushed.EnrollToken(t))
	fake.PutSecret(project, "byoc-acme-input-team", "platform")
	fake.PutSecret(project, "byoc-acme-input-admin-email", email)
	fake.PutSecret(project, "byoc-acme-secret-license-key", license)
	fake.CreateServiceAccount(maintSA)
	fake.GrantTokenCreator(agentSA, maintSA)
	fake.GrantSecretAccessor(agentSA)
	fake.Setenv(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fake.API.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)

	sm := func(id, param string) *stackconfig.Source {
		return &stackconfig.Source{GCPSecret: id, Parameter: param}
	}
	cfg := stackconfig.Config{Version: 1, Format: stackconfig.FormatGCP, Stack: "byoc-acme", Install: "acme", IMS: ims.URL(),
		GCP:         &stackconfig.GCP{Project: project, Region: "europe-west1", AgentServiceAccount: agentSA},
		EnrollToken: *sm("byoc-acme-enrollment-token", "enrollment_token"),
		Modes: map[string]stackconfig.Role{
			"maintenance": {Enabled: true, ServiceAccount: maintSA, Name: "byoc-acme-maintenance", Parameter: "enable_maintenance"},
			"provision":   {Enabled: false, Name: "byoc-acme-provision", Parameter: "enable_provision"},
		},
		Inputs: map[string]stackconfig.Input{
			"team":        {Parameter: "input_team", From: sm("byoc-acme-input-team", "input_team")},
			"admin_email": {Sensitive: true, Parameter: "input_admin_email", From: sm("byoc-acme-input-admin-email", "input_admin_email")},
		},
		Secrets:   map[string]stackconfig.Source{"license_key": *sm("byoc-acme-secret-license-key", "secret_license_key")},
		Registry:  "europe-west1-docker.pkg.dev/acme-prod-1/byoc-acme",
		Endpoints: map[string]string{"iamcredentials": fake.URL(), "secretmanager": fake.URL()},
	}
	write := func() string {
		b, _ := json.Marshal(cfg)
		path := filepath.Join(t.TempDir(), "stack.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	state := t.TempDir()
	agent := cluster.StartAgent(t, ims.URL(), "", state, "--stack-config", write())

	var st stackStatusJSON
	cluster.Eventually(t, 20*time.Second, "the agent reports its stack", func() bool {
		o, _, _ := cli.Exec("install", "get", "acme", "-o", "json")
		return json.Unmarshal([]byte(o), &st) == nil && st.Agent.Stack.Format == "gcp"
	})
	if st.Agent.Stack.Inputs["team"] != "platform" || st.Agent.Stack.Inputs["admin_email"] != "set" {
		t.Fatalf("reported %+v\n%s", st.Agent.Stack, agent.Output())
	}
	if out := cli.Run(0, "action", "run", "acme", "hello", "--wait"); !strings.Contains(out, "hello=platform/***/s") {
		t.Fatalf("hello:\n%s", out)
	}
	out := cli.Run(0, "action", "run", "acme", "whoami", "--wait")
	var jobToken string
	for _, tok := range fake.Issued() {
		if tok.Account == maintSA {
			jobToken = tok.Token
		}
		if tok.Account != agentSA && tok.Account != maintSA {
			t.Errorf("a token of %s was issued", tok.Account)
		}
	}
	// The agent's way to its own token (the metadata server) does not
	// reach the job.
	if strings.Contains(out, "md=x127.0.0.1") {
		t.Errorf("the job saw the agent's metadata server:\n%s", out)
	}
	if jobToken == "" || !strings.Contains(out, "sa="+maintSA) || !strings.Contains(out, "token=***") || !strings.Contains(out, "project="+project) {
		t.Fatalf("whoami (maintenance token %q):\n%s", jobToken, out)
	}
	for _, leak := range []string{jobToken, email, license} {
		if strings.Contains(out, leak) {
			t.Errorf("a secret reached the operator: %q", leak)
		}
	}
	agent.Stop()

	// The customer turns maintenance off: its jobs fail naming the variable.
	cfg.Modes["maintenance"] = stackconfig.Role{Enabled: false, Name: "byoc-acme-maintenance", Parameter: "enable_maintenance"}
	cluster.StartAgent(t, ims.URL(), "", state, "--stack-config", write())
	out, _, _ = cli.Exec("action", "run", "acme", "hello", "--wait")
	if !strings.Contains(out, "enable_maintenance = true") || !strings.Contains(out, "Terraform configuration") {
		t.Fatalf("action run with maintenance off:\n%s", out)
	}
}
