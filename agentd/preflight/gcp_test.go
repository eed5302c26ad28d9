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
	"github.com/byoc-dev/byoc/agentd/stack/gcpfake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// TestPreflightGCP: a Google Cloud stack's checks impersonate (and drop
// a one-minute token of) each enabled mode's service account and read
// the enrolment token from Secret Manager as the agent's; an account
// the agent may not impersonate fails with a fix naming its variable,
// and a secret it may not read fails naming the accessor role.
func TestPreflightGCP(t *testing.T) {
	const agent, prov, maint = "acme-agent@acme-prod-1.iam.gserviceaccount.com", "acme-provision@acme-prod-1.iam.gserviceaccount.com", "acme-maintenance@acme-prod-1.iam.gserviceaccount.com"
	fake := gcpfake.New(t, agent)
	fake.Setenv(t)
	fake.CreateServiceAccount(prov, maint)
	fake.GrantTokenCreator(agent, prov)
	fake.GrantSecretAccessor(agent)
	fake.PutSecret("acme-prod-1", "acme-enrollment-token", "byoc_enr_x.k")
	ims := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(ims.Close)
	c := stackconfig.Config{Version: 1, Format: stackconfig.FormatGCP, Install: "acme", IMS: ims.URL,
		GCP:         &stackconfig.GCP{Project: "acme-prod-1", Region: "europe-west1", AgentServiceAccount: agent},
		EnrollToken: stackconfig.Source{GCPSecret: "acme-enrollment-token", Parameter: "enrollment_token"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ServiceAccount: prov, Name: "acme-provision", Parameter: "enable_provision"},
			"maintenance": {Enabled: true, ServiceAccount: maint, Name: "acme-maintenance", Parameter: "enable_maintenance"},
			"break_glass": {Enabled: false, Name: "acme-break-glass", Parameter: "enable_break_glass"},
		},
		Secrets:   map[string]stackconfig.Source{"license_key": {GCPSecret: "acme-secret-license-key", Parameter: "secret_license_key"}},
		Endpoints: map[string]string{"iamcredentials": fake.URL(), "secretmanager": fake.URL()}}
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
	if r := m["role provision"]; r.Status != preflight.Pass || !strings.Contains(r.Detail, "impersonated service account "+prov) {
		t.Errorf("provision: %+v", r)
	}
	if r := m["role maintenance"]; r.Status != preflight.Fail || !strings.Contains(r.Fix, "enable_maintenance = true") || !strings.Contains(r.Fix, "roles/iam.serviceAccountTokenCreator") {
		t.Errorf("maintenance (no token creator): %+v", r)
	}
	if r := m["role break_glass"]; r.Status != preflight.Off || !strings.Contains(r.Detail, "enable_break_glass=false") {
		t.Errorf("break_glass: %+v", r)
	}
	if r := m["enrolment token"]; r.Status != preflight.Pass {
		t.Errorf("enrolment token: %+v", r)
	}
	if r := m["customer inputs and secrets"]; r.Status != preflight.Fail || !strings.Contains(r.Fix, "roles/secretmanager.secretAccessor") {
		t.Errorf("secrets (missing): %+v", r)
	}
}
