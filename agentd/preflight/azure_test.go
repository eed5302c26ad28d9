package preflight_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/azurefake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// TestPreflightAzure: an Azure stack's checks get (and drop) a token of
// each enabled mode's managed identity and read the enrolment token from
// Key Vault with the agent's; an identity not attached to the VM fails
// with a fix naming its parameter.
func TestPreflightAzure(t *testing.T) {
	fake := azurefake.New(t)
	fake.Setenv(t)
	agentID, provID, maintID := azurefake.NewID(), azurefake.NewID(), azurefake.NewID()
	fake.Attach(agentID, provID)
	fake.GrantSecretsUser(agentID)
	fake.PutSecret("enrollment-token", "byoc_enr_x.k")
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(ims.Close)
	c := stackconfig.Config{Version: 1, Format: stackconfig.FormatAzure, Install: "acme", IMS: ims.URL,
		Azure: &stackconfig.Azure{TenantID: fake.Tenant, SubscriptionID: azurefake.NewID(), ResourceGroup: "byoc-acme",
			AgentClientID: agentID, KeyVaultURL: "https://byocacme.vault.azure.net/"},
		EnrollToken: stackconfig.Source{KeyVaultSecret: "enrollment-token", Parameter: "EnrollmentToken"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ClientID: provID, Name: "byoc-acme-provision", Parameter: "EnableProvision"},
			"maintenance": {Enabled: true, ClientID: maintID, Name: "byoc-acme-maintenance", Parameter: "EnableMaintenance"},
			"break_glass": {Enabled: false, Name: "byoc-acme-break-glass", Parameter: "EnableBreakGlass"},
		},
		Endpoints: map[string]string{"keyvault": fake.VaultURL()}}
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := stack.OpenWith(path, stack.OpenOptions{HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	m := byCheck(preflight.Run(context.Background(), preflight.Options{Stack: st, StateDir: t.TempDir()}))
	if r := m["role provision"]; r.Status != preflight.Pass || !strings.Contains(r.Detail, "got a token of managed identity "+provID) {
		t.Errorf("provision: %+v", r)
	}
	if r := m["role maintenance"]; r.Status != preflight.Fail || !strings.Contains(r.Fix, "EnableMaintenance=true") || !strings.Contains(r.Fix, "attached it to the agent's VM") {
		t.Errorf("maintenance (not attached): %+v", r)
	}
	if r := m["role break_glass"]; r.Status != preflight.Off || !strings.Contains(r.Detail, "EnableBreakGlass=false") {
		t.Errorf("break_glass: %+v", r)
	}
	if r := m["enrolment token"]; r.Status != preflight.Pass {
		t.Errorf("enrolment token: %+v", r)
	}
}
