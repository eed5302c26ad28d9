package e2e

import (
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/stack/azurefake"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// An Azure stack's agent, as the real binary: its enrolment token and the
// customer's inputs and secret come from Key Vault, and each job gets a
// token of its mode's managed identity; both are agentd/stack/azurefake,
// reached by the real azidentity (through IDENTITY_ENDPOINT) and azsecrets
// clients, over TLS trusted through SSL_CERT_FILE. A mode turned off
// fails its jobs naming the template parameter.
func TestAzureStackAgent(t *testing.T) {
	skipShort(t)
	const email, license = "ops+az@acme.example", "LIC-AZ-0042"
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
script = "echo client=$ARM_CLIENT_ID >> $BYOC_OUTPUTS; echo token=$BYOC_AZURE_ACCESS_TOKEN >> $BYOC_OUTPUTS; echo rg=$BYOC_AZURE_RESOURCE_GROUP >> $BYOC_OUTPUTS; echo endpoint=x$IDENTITY_ENDPOINT$IDENTITY_HEADER >> $BYOC_OUTPUTS"
`
	pushed := cli.PushApp(app)

	fake := azurefake.New(t)
	fake.PutSecret("enrollment-token", pushed.EnrollToken(t))
	fake.PutSecret("input-team", "platform")
	fake.PutSecret("input-admin-email", email)
	fake.PutSecret("secret-license-key", license)
	agentID, maintID := azurefake.NewID(), azurefake.NewID()
	fake.Attach(agentID, maintID)
	fake.GrantSecretsUser(agentID)
	fake.Setenv(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fake.Server.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)

	kv := func(name, param string) *stackconfig.Source {
		return &stackconfig.Source{KeyVaultSecret: name, Parameter: param}
	}
	cfg := stackconfig.Config{Version: 1, Format: stackconfig.FormatAzure, Stack: "acme-deployment", Install: "acme", IMS: ims.URL(),
		Azure: &stackconfig.Azure{TenantID: fake.Tenant, SubscriptionID: "00000000-0000-0000-0000-0000000000aa", ResourceGroup: "byoc-acme",
			AgentClientID: agentID, KeyVaultURL: "https://byocacme.vault.azure.net/"},
		EnrollToken: *kv("enrollment-token", "EnrollmentToken"),
		Modes: map[string]stackconfig.Role{
			"maintenance": {Enabled: true, ClientID: maintID, Name: "byoc-acme-maintenance", Parameter: "EnableMaintenance"},
			"provision":   {Enabled: false, Name: "byoc-acme-provision", Parameter: "EnableProvision"},
		},
		Inputs: map[string]stackconfig.Input{
			"team":        {Parameter: "InputTeam", From: kv("input-team", "InputTeam")},
			"admin_email": {Sensitive: true, Parameter: "InputAdminEmail", From: kv("input-admin-email", "InputAdminEmail")},
		},
		Secrets:   map[string]stackconfig.Source{"license_key": *kv("secret-license-key", "SecretLicenseKey")},
		Registry:  "byocacme.azurecr.io",
		Outputs:   map[string]string{"RegistryLoginServer": "byocacme.azurecr.io"},
		Endpoints: map[string]string{"keyvault": fake.VaultURL()},
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
		return json.Unmarshal([]byte(o), &st) == nil && st.Agent.Stack.Format == "azure"
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
		if tok.ClientID == maintID {
			jobToken = tok.Token
		}
		if tok.ClientID != agentID && tok.ClientID != maintID {
			t.Errorf("a token of %s was issued", tok.ClientID)
		}
	}
	// The agent's own way to its identities (the token endpoint and its
	// header secret) does not reach the job.
	if !strings.Contains(out, "endpoint=x\n") && !strings.Contains(out, "endpoint=x ") && !strings.HasSuffix(strings.TrimSpace(out), "endpoint=x") {
		t.Errorf("the job saw the agent's identity endpoint:\n%s", out)
	}
	if jobToken == "" || !strings.Contains(out, "client="+maintID) || !strings.Contains(out, "token=***") || !strings.Contains(out, "rg=byoc-acme") {
		t.Fatalf("whoami (maintenance token %q):\n%s", jobToken, out)
	}
	for _, leak := range []string{jobToken, email, license, fake.Header} {
		if strings.Contains(out, leak) {
			t.Errorf("a secret reached the operator: %q", leak)
		}
	}
	agent.Stop()

	// The customer turns maintenance off: its jobs fail naming the parameter.
	cfg.Modes["maintenance"] = stackconfig.Role{Enabled: false, Name: "byoc-acme-maintenance", Parameter: "EnableMaintenance"}
	cluster.StartAgent(t, ims.URL(), "", state, "--stack-config", write())
	out, _, _ = cli.Exec("action", "run", "acme", "hello", "--wait")
	if !strings.Contains(out, "EnableMaintenance=true") || !strings.Contains(out, "az deployment group create") {
		t.Fatalf("action run with maintenance off:\n%s", out)
	}
}
