package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/gcpfake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

const (
	gcpProject = "acme-prod-1"
	gcpAgent   = "acme-agent@acme-prod-1.iam.gserviceaccount.com"
	gcpProv    = "acme-provision@acme-prod-1.iam.gserviceaccount.com"
	gcpMaint   = "acme-maintenance@acme-prod-1.iam.gserviceaccount.com"
	gcpBG      = "acme-break-glass@acme-prod-1.iam.gserviceaccount.com"
)

// gcpStack writes a Google Cloud stack config pointing at the fake (the
// metadata server through GCE_METADATA_HOST, both APIs through
// endpoints) and opens it with the fake's TLS client; the agent may read
// secrets and impersonate every mode's account.
func gcpStack(t *testing.T, fake *gcpfake.GCP, edit func(*stackconfig.Config)) *stack.Stack {
	t.Helper()
	fake.Setenv(t)
	fake.CreateServiceAccount(gcpProv, gcpMaint, gcpBG)
	for _, sa := range []string{gcpProv, gcpMaint, gcpBG} {
		fake.GrantTokenCreator(gcpAgent, sa)
	}
	fake.GrantSecretAccessor(gcpAgent)
	c := stackconfig.Config{Version: 1, Format: stackconfig.FormatGCP, Install: "acme", IMS: "https://ims.example.com",
		GCP:         &stackconfig.GCP{Project: gcpProject, Region: "europe-west1", AgentServiceAccount: gcpAgent},
		EnrollToken: stackconfig.Source{GCPSecret: "acme-enrollment-token", Parameter: "enrollment_token"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ServiceAccount: gcpProv, Name: "acme-provision", Parameter: "enable_provision"},
			"maintenance": {Enabled: true, ServiceAccount: gcpMaint, Name: "acme-maintenance", Parameter: "enable_maintenance"},
			"deprovision": {Enabled: false, Name: "acme-deprovision", Parameter: "enable_deprovision"},
			"break_glass": {Enabled: true, ServiceAccount: gcpBG, Name: "acme-break-glass", Parameter: "enable_break_glass"},
		},
		Inputs: map[string]stackconfig.Input{
			"admin_email": {Sensitive: true, Parameter: "input_admin_email", From: &stackconfig.Source{GCPSecret: "acme-input-admin-email"}},
		},
		Secrets:   map[string]stackconfig.Source{"license_key": {GCPSecret: "acme-secret-license-key", Parameter: "secret_license_key"}},
		Registry:  "europe-west1-docker.pkg.dev/acme-prod-1/acme-byoc",
		Endpoints: map[string]string{"iamcredentials": fake.URL(), "secretmanager": fake.URL()},
	}
	if edit != nil {
		edit(&c)
	}
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := stack.OpenWith(path, stack.OpenOptions{HTTPClient: fake.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGCPModeTokens: each job gets an access token of its own mode's
// service account (impersonated through the IAM Credentials API with the
// agent's metadata token), lasting the job's limit plus the grace, in
// its env and its values to redact, and never the agent's own token or
// another mode's.
func TestGCPModeTokens(t *testing.T) {
	fake := gcpfake.New(t, gcpAgent)
	fake.PutSecret(gcpProject, "acme-enrollment-token", "tok-1")
	s := gcpStack(t, fake, nil)
	ctx := context.Background()
	if tok, err := s.EnrollToken(ctx); err != nil || tok != "tok-1" {
		t.Fatalf("enrol token %q, %v", tok, err)
	}
	prov, err := s.Assume(ctx, "provision", "", "job-1", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	maint, err := s.Assume(ctx, "maintenance", "", "job-2", 2*time.Hour, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	issued := map[string]gcpfake.Token{}
	for _, tok := range fake.Issued() {
		issued[tok.Account] = tok
	}
	if issued[gcpAgent].Token == "" || issued[gcpProv].Lifetime != 15*time.Minute || issued[gcpMaint].Lifetime != time.Hour {
		t.Fatalf("issued %+v", issued)
	}
	for _, tc := range []struct {
		mode  string
		creds stack.Credentials
		own   string
	}{{"provision", prov, gcpProv}, {"maintenance", maint, gcpMaint}} {
		env := tc.creds.Env
		tok := issued[tc.own]
		if env["GOOGLE_OAUTH_ACCESS_TOKEN"] != tok.Token || env["CLOUDSDK_AUTH_ACCESS_TOKEN"] != tok.Token ||
			env["GOOGLE_CLOUD_PROJECT"] != gcpProject || env["CLOUDSDK_CORE_PROJECT"] != gcpProject ||
			env["GOOGLE_REGION"] != "europe-west1" || env["BYOC_GCP_SERVICE_ACCOUNT"] != tc.own {
			t.Errorf("%s env %v", tc.mode, env)
		}
		if !slices.Contains(tc.creds.Secret, tok.Token) {
			t.Errorf("%s: its token is not among the values to redact: %v", tc.mode, tc.creds.Secret)
		}
		if !tc.creds.Expires.Equal(tok.Expires) || tc.creds.RoleARN != tc.own {
			t.Errorf("%s expires %v (issued %v), account %s", tc.mode, tc.creds.Expires, tok.Expires, tc.creds.RoleARN)
		}
		for acct, other := range issued {
			if acct == tc.own {
				continue
			}
			for k, v := range env {
				if strings.Contains(v, other.Token) {
					t.Errorf("%s: %s carries %s's token", tc.mode, k, acct)
				}
			}
		}
	}
}

// TestGCPDisabledMode: a turned-off mode's job is refused naming the
// Terraform variable, and no token is asked for; a break-glass job
// without a live grant gets none either.
func TestGCPDisabledMode(t *testing.T) {
	fake := gcpfake.New(t, gcpAgent)
	s := gcpStack(t, fake, nil)
	_, err := s.Assume(context.Background(), "deprovision", "", "job-3", time.Minute, time.Time{})
	var re *stack.RoleError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "enable_deprovision = true") || !strings.Contains(err.Error(), "Terraform") {
		t.Fatalf("got %v", err)
	}
	_, err = s.Assume(context.Background(), "break_glass", "", "job-4", time.Minute, time.Time{})
	var ng *stack.NoGrantError
	if !errors.As(err, &ng) {
		t.Fatalf("break glass without grant: %v", err)
	}
	for _, tok := range fake.Issued() {
		if tok.Account != gcpAgent {
			t.Errorf("a token of %s was issued", tok.Account)
		}
	}
	// Under a grant ending in 5 minutes the token lasts until then.
	if _, err := s.Assume(context.Background(), "break_glass", "", "job-5", time.Hour, time.Now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if is := fake.Issued(); is[len(is)-1].Account != gcpBG || is[len(is)-1].Lifetime > 5*time.Minute {
		t.Errorf("break-glass token %+v", is[len(is)-1])
	}
}

// TestGCPSecretManager: inputs and secrets are read from Secret Manager
// as the agent's service account; sensitive ones are reported as set.
func TestGCPSecretManager(t *testing.T) {
	fake := gcpfake.New(t, gcpAgent)
	fake.PutSecret(gcpProject, "acme-input-admin-email", "ops@acme.example")
	fake.PutSecret(gcpProject, "acme-secret-license-key", "LIC-123")
	s := gcpStack(t, fake, nil)
	v, err := s.Values(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Inputs["admin_email"] != "ops@acme.example" || v.Report["admin_email"] != stack.Set || v.Secrets["license_key"] != "LIC-123" ||
		!slices.Contains(v.Sensitive, "LIC-123") {
		t.Fatalf("values %+v", v)
	}
}

// TestGCPRefused: a mode's account the agent may not impersonate, or
// that was deleted, fails naming the account and the variable; a secret
// the agent may not read fails naming it.
func TestGCPRefused(t *testing.T) {
	fake := gcpfake.New(t, gcpAgent)
	s := gcpStack(t, fake, nil)
	fake.DeleteServiceAccount(gcpMaint)
	_, err := s.Assume(context.Background(), "maintenance", "", "job-6", time.Minute, time.Time{})
	if err == nil || !strings.Contains(err.Error(), gcpMaint) || !strings.Contains(err.Error(), "enable_maintenance") || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("deleted account: %v", err)
	}
	if got, err := s.CheckRole(context.Background(), "provision", ""); err != nil || got != "service account "+gcpProv {
		t.Fatalf("check provision: %q, %v", got, err)
	}
	// A VM running as another account may impersonate nothing.
	fake3 := gcpfake.New(t, "stranger@acme-prod-1.iam.gserviceaccount.com")
	s3 := gcpStack(t, fake3, nil)
	_, err = s3.Assume(context.Background(), "provision", "", "job-8", time.Minute, time.Time{})
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "serviceAccountTokenCreator") {
		t.Fatalf("not a token creator: %v", err)
	}
	_, err = s3.EnrollToken(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "acme-enrollment-token") {
		t.Fatalf("not a secret accessor: %v", err)
	}
}
