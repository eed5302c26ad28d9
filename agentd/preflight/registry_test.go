package preflight_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/preflight"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/azurefake"
	"github.com/byoc-dev/byoc/agentd/stack/gcpfake"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

func openStack(t *testing.T, c stackconfig.Config, hc *http.Client) *stack.Stack {
	t.Helper()
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := stack.OpenWith(path, stack.OpenOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPreflightRegistryWritableAzure: each turned-on mode's managed
// identity's token is exchanged at the install registry (azurefake's
// ACR in front of a real docker-registry) and an upload started and
// cancelled; an identity without AcrPush fails with a fix naming the
// role and the mode's parameter. Nothing is left in the registry.
func TestPreflightRegistryWritableAzure(t *testing.T) {
	backend := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	fake := azurefake.New(t)
	fake.Setenv(t)
	acr := fake.StartRegistry(t, backend.Host)
	agentID, provID, maintID := azurefake.NewID(), azurefake.NewID(), azurefake.NewID()
	fake.Attach(agentID, provID, maintID)
	fake.GrantRegistry(provID, "AcrPush")
	fake.GrantRegistry(maintID, "AcrPull")
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(ims.Close)
	st := openStack(t, stackconfig.Config{Version: 1, Format: stackconfig.FormatAzure, Install: "acme", IMS: ims.URL,
		Azure: &stackconfig.Azure{TenantID: fake.Tenant, SubscriptionID: azurefake.NewID(), ResourceGroup: "byoc-acme",
			AgentClientID: agentID, KeyVaultURL: "https://byocacme.vault.azure.net/"},
		EnrollToken: stackconfig.Source{KeyVaultSecret: "enrollment-token", Parameter: "EnrollmentToken"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ClientID: provID, Name: "byoc-acme-provision", Parameter: "EnableProvision"},
			"maintenance": {Enabled: true, ClientID: maintID, Name: "byoc-acme-maintenance", Parameter: "EnableMaintenance"},
			"break_glass": {Enabled: false, Name: "byoc-acme-break-glass", Parameter: "EnableBreakGlass"},
		},
		Registry:  acr.Host,
		Endpoints: map[string]string{"keyvault": fake.VaultURL()}}, fake.Client())
	m := byCheck(preflight.Run(context.Background(), preflight.Options{Stack: st, StateDir: t.TempDir()}))
	if r := m["registry"]; r.Status != preflight.Pass {
		t.Errorf("registry: %+v", r)
	}
	if r := m["registry writable by provision"]; r.Status != preflight.Pass || !strings.Contains(r.Detail, provID) {
		t.Errorf("provision: %+v", r)
	}
	if r := m["registry writable by maintenance"]; r.Status != preflight.Fail || !strings.Contains(r.Fix, "AcrPush") || !strings.Contains(r.Fix, "EnableMaintenance") {
		t.Errorf("maintenance (AcrPull only): %+v", r)
	}
	if _, ok := m["registry writable by break_glass"]; ok {
		t.Error("a turned-off mode was checked")
	}
	// The registry's catalog lists no repository: the upload was
	// cancelled.
	resp, err := http.Get("http://" + backend.Host + "/v2/_catalog")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cat struct{ Repositories []string }
	if err := json.NewDecoder(resp.Body).Decode(&cat); err != nil || len(cat.Repositories) != 0 {
		t.Errorf("the catalog after the check: %v %v", cat.Repositories, err)
	}
	checkNoUploads(t, backend)
}

// TestPreflightRegistryWritableGCP: the same with each mode's
// impersonated service account at gcpfake's Artifact Registry.
func TestPreflightRegistryWritableGCP(t *testing.T) {
	const agent, prov, maint = "acme-agent@acme-prod-1.iam.gserviceaccount.com", "acme-provision@acme-prod-1.iam.gserviceaccount.com", "acme-maintenance@acme-prod-1.iam.gserviceaccount.com"
	backend := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	fake := gcpfake.New(t, agent)
	fake.Setenv(t)
	ar := fake.StartArtifactRegistry(t, backend.Host)
	fake.CreateServiceAccount(prov, maint)
	fake.GrantTokenCreator(agent, prov)
	fake.GrantTokenCreator(agent, maint)
	fake.GrantArtifactRegistry(prov, "roles/artifactregistry.writer")
	fake.GrantArtifactRegistry(maint, "roles/artifactregistry.reader")
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(ims.Close)
	st := openStack(t, stackconfig.Config{Version: 1, Format: stackconfig.FormatGCP, Install: "acme", IMS: ims.URL,
		GCP:         &stackconfig.GCP{Project: "acme-prod-1", Region: "europe-west1", AgentServiceAccount: agent},
		EnrollToken: stackconfig.Source{GCPSecret: "acme-enrollment-token", Parameter: "enrollment_token"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ServiceAccount: prov, Name: "acme-provision", Parameter: "enable_provision"},
			"maintenance": {Enabled: true, ServiceAccount: maint, Name: "acme-maintenance", Parameter: "enable_maintenance"},
		},
		Registry:  ar.Host + "/acme-prod-1/byoc-acme",
		Endpoints: map[string]string{"iamcredentials": fake.URL(), "secretmanager": fake.URL()}}, fake.Client())
	m := byCheck(preflight.Run(context.Background(), preflight.Options{Stack: st, StateDir: t.TempDir()}))
	if r := m["registry writable by provision"]; r.Status != preflight.Pass || !strings.Contains(r.Detail, prov) || !strings.Contains(r.Detail, "acme-prod-1/byoc-acme") {
		t.Errorf("provision: %+v", r)
	}
	if r := m["registry writable by maintenance"]; r.Status != preflight.Fail || !strings.Contains(r.Fix, "roles/artifactregistry.writer") || !strings.Contains(r.Fix, "enable_maintenance") {
		t.Errorf("maintenance (reader only): %+v", r)
	}
	checkNoUploads(t, backend)
}

// checkNoUploads fails if an upload is open in the registry's storage
// (docker-registry's cancel removes an upload's data and startedat, and
// leaves its empty hash states).
func checkNoUploads(t *testing.T, backend *ocitest.Registry) {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(filepath.Join(backend.Dir, "storage"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(path, "/_uploads/") && (d.Name() == "startedat" || d.Name() == "data") {
			t.Errorf("an upload is left open: %s", path)
		}
		if err == nil && d.IsDir() && d.Name() == "_uploads" {
			n++
		}
		return nil
	})
	if n == 0 {
		t.Error("no upload was started")
	}
}
