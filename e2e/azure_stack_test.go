package e2e

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/stack/azurefake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// An Azure stack's agent, as the real binary: its enrolment token and the
// customer's inputs and secret come from Key Vault, and each job gets a
// token of its mode's managed identity; both are agentd/stack/azurefake,
// reached by the real azidentity (through IDENTITY_ENDPOINT) and azsecrets
// clients, over TLS trusted through SSL_CERT_FILE. A mode turned off
// fails its jobs naming the template parameter.
func TestAzureStackAgent(t *testing.T) {
	var fake *azurefake.Azure
	var agentID, maintID, provID string
	runCloudStack(t, cloudStack{
		format: "azure", cloud: "azure",
		whoami: "echo client=$ARM_CLIENT_ID >> $BYOC_OUTPUTS; echo token=$BYOC_AZURE_ACCESS_TOKEN >> $BYOC_OUTPUTS; echo rg=$BYOC_AZURE_RESOURCE_GROUP >> $BYOC_OUTPUTS; echo endpoint=x$IDENTITY_ENDPOINT$IDENTITY_HEADER >> $BYOC_OUTPUTS",
		setup: func(t *testing.T, ims, enrollToken, email, license string) *stackconfig.Config {
			fake = azurefake.New(t)
			fake.PutSecret("enrollment-token", enrollToken)
			fake.PutSecret("input-admin-email", email)
			fake.PutSecret("secret-license-key", license)
			agentID, maintID, provID = azurefake.NewID(), azurefake.NewID(), azurefake.NewID()
			fake.Attach(agentID, maintID, provID)
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
			return &stackconfig.Config{Version: 1, Format: stackconfig.FormatAzure, Stack: "demo-deployment", Install: "demo", IMS: ims,
				Azure: &stackconfig.Azure{TenantID: fake.Tenant, SubscriptionID: "00000000-0000-0000-0000-0000000000aa", ResourceGroup: "byoc-demo",
					AgentClientID: agentID, KeyVaultURL: "https://byocacme.vault.azure.net/"},
				EnrollToken: *kv("enrollment-token", "EnrollmentToken"),
				Modes: map[string]stackconfig.Role{
					"provision":   {Enabled: true, ClientID: provID, Name: "byoc-demo-provision", Parameter: "EnableProvision"},
					"maintenance": {Enabled: true, ClientID: maintID, Name: "byoc-demo-maintenance", Parameter: "EnableMaintenance"},
					"deprovision": {Enabled: false, Name: "byoc-demo-deprovision", Parameter: "EnableDeprovision"},
				},
				Inputs: map[string]stackconfig.Input{
					"admin_email": {Sensitive: true, Parameter: "InputAdminEmail", From: kv("input-admin-email", "InputAdminEmail")},
				},
				Secrets:   map[string]stackconfig.Source{"license_key": *kv("secret-license-key", "SecretLicenseKey")},
				Registry:  "byocacme.azurecr.io",
				Outputs:   map[string]string{"RegistryLoginServer": "byocacme.azurecr.io"},
				Endpoints: map[string]string{"keyvault": fake.VaultURL()},
			}
		},
		issued: func() (ids []string) {
			for _, tok := range fake.Issued() {
				ids = append(ids, tok.ClientID)
			}
			return ids
		},
		checkWhoami: func(t *testing.T, out string) []string {
			var jobToken string
			for _, tok := range fake.Issued() {
				if tok.ClientID == maintID {
					jobToken = tok.Token
				}
				if tok.ClientID != agentID && tok.ClientID != maintID && tok.ClientID != provID {
					t.Errorf("a token of %s was issued", tok.ClientID)
				}
			}
			// The agent's own way to its identities (the token endpoint
			// and its header secret) does not reach the job.
			if !strings.Contains(out, "endpoint=x\n") && !strings.Contains(out, "endpoint=x ") && !strings.HasSuffix(strings.TrimSpace(out), "endpoint=x") {
				t.Errorf("the job saw the agent's identity endpoint:\n%s", out)
			}
			if jobToken == "" || !strings.Contains(out, "client="+maintID) || !strings.Contains(out, "token=***") || !strings.Contains(out, "rg=byoc-demo") {
				t.Fatalf("whoami (maintenance token %q):\n%s", jobToken, out)
			}
			return []string{jobToken, fake.Header}
		},
		refusal: "az deployment group create",
		registry: func(t *testing.T, backend string) (string, func() []string) {
			acr := fake.StartRegistry(t, backend)
			fake.GrantRegistry(provID, "AcrPush")
			fake.GrantRegistry(maintID, "AcrPush")
			return acr.Host, acr.Logins
		},
	})
}
