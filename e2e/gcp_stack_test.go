package e2e

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/stack/gcpfake"
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
	const project = "acme-prod-1"
	const agentSA, maintSA, provSA = "byoc-demo-agent@acme-prod-1.iam.gserviceaccount.com", "byoc-demo-maintenance@acme-prod-1.iam.gserviceaccount.com", "byoc-demo-provision@acme-prod-1.iam.gserviceaccount.com"
	var fake *gcpfake.GCP
	runCloudStack(t, cloudStack{
		format: "gcp", cloud: "gcp",
		whoami: "echo sa=$BYOC_GCP_SERVICE_ACCOUNT >> $BYOC_OUTPUTS; echo token=$GOOGLE_OAUTH_ACCESS_TOKEN >> $BYOC_OUTPUTS; echo project=$GOOGLE_CLOUD_PROJECT >> $BYOC_OUTPUTS; echo md=x$GCE_METADATA_HOST >> $BYOC_OUTPUTS",
		setup: func(t *testing.T, ims, enrollToken, email, license string) *stackconfig.Config {
			fake = gcpfake.New(t, agentSA)
			fake.PutSecret(project, "byoc-demo-enrollment-token", enrollToken)
			fake.PutSecret(project, "byoc-demo-input-admin-email", email)
			fake.PutSecret(project, "byoc-demo-secret-license-key", license)
			for _, sa := range []string{maintSA, provSA} {
				fake.CreateServiceAccount(sa)
				fake.GrantTokenCreator(agentSA, sa)
			}
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
			return &stackconfig.Config{Version: 1, Format: stackconfig.FormatGCP, Stack: "byoc-demo", Install: "demo", IMS: ims,
				GCP:         &stackconfig.GCP{Project: project, Region: "europe-west1", AgentServiceAccount: agentSA},
				EnrollToken: *sm("byoc-demo-enrollment-token", "enrollment_token"),
				Modes: map[string]stackconfig.Role{
					"provision":   {Enabled: true, ServiceAccount: provSA, Name: "byoc-demo-provision", Parameter: "enable_provision"},
					"maintenance": {Enabled: true, ServiceAccount: maintSA, Name: "byoc-demo-maintenance", Parameter: "enable_maintenance"},
					"deprovision": {Enabled: false, Name: "byoc-demo-deprovision", Parameter: "enable_deprovision"},
				},
				Inputs: map[string]stackconfig.Input{
					"admin_email": {Sensitive: true, Parameter: "input_admin_email", From: sm("byoc-demo-input-admin-email", "input_admin_email")},
				},
				Secrets:   map[string]stackconfig.Source{"license_key": *sm("byoc-demo-secret-license-key", "secret_license_key")},
				Registry:  "europe-west1-docker.pkg.dev/acme-prod-1/byoc-demo",
				Endpoints: map[string]string{"iamcredentials": fake.URL(), "secretmanager": fake.URL()},
			}
		},
		issued: func() (ids []string) {
			for _, tok := range fake.Issued() {
				if tok.Account != agentSA {
					ids = append(ids, tok.Account)
				}
			}
			return ids
		},
		checkWhoami: func(t *testing.T, out string) []string {
			var jobToken string
			for _, tok := range fake.Issued() {
				if tok.Account == maintSA {
					jobToken = tok.Token
				}
				if tok.Account != agentSA && tok.Account != maintSA && tok.Account != provSA {
					t.Errorf("a token of %s was issued", tok.Account)
				}
			}
			// The agent's way to its own token (the metadata server) does
			// not reach the job.
			if strings.Contains(out, "md=x127.0.0.1") {
				t.Errorf("the job saw the agent's metadata server:\n%s", out)
			}
			if jobToken == "" || !strings.Contains(out, "sa="+maintSA) || !strings.Contains(out, "token=***") || !strings.Contains(out, "project="+project) {
				t.Fatalf("whoami (maintenance token %q):\n%s", jobToken, out)
			}
			return []string{jobToken}
		},
		refusal: "enable_maintenance = true",
		registry: func(t *testing.T, backend string) (string, func() []string) {
			ar := fake.StartArtifactRegistry(t, backend)
			fake.GrantArtifactRegistry(provSA, "roles/artifactregistry.writer")
			fake.GrantArtifactRegistry(maintSA, "roles/artifactregistry.writer")
			return ar.Host + "/acme-prod-1/byoc-demo", ar.Logins
		},
	})
}
