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
	"github.com/byoc-dev/byoc/agentd/stack/azurefake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
)

// azureIDs are an Azure stack's identities, new for each test (MSAL
// caches tokens per client id for the whole process).
type azureIDs struct{ agent, prov, maint, bg string }

// azureStack writes an Azure stack config pointing at the fake (the
// token endpoint through IDENTITY_ENDPOINT, Key Vault through
// endpoints.keyvault) and opens it with the fake's TLS client; the
// agent's identity may read Key Vault, and every identity is attached.
func azureStack(t *testing.T, fake *azurefake.Azure, edit func(*stackconfig.Config)) (*stack.Stack, azureIDs) {
	t.Helper()
	fake.Setenv(t)
	ids := azureIDs{agent: azurefake.NewID(), prov: azurefake.NewID(), maint: azurefake.NewID(), bg: azurefake.NewID()}
	fake.Attach(ids.agent, ids.prov, ids.maint, ids.bg)
	fake.GrantSecretsUser(ids.agent)
	c := stackconfig.Config{Version: 1, Format: stackconfig.FormatAzure, Install: "acme", IMS: "https://ims.example.com",
		Azure: &stackconfig.Azure{TenantID: fake.Tenant, SubscriptionID: "00000000-0000-0000-0000-0000000000aa", ResourceGroup: "acme-byoc",
			AgentClientID: ids.agent, KeyVaultURL: "https://acme-kv.vault.azure.net/"},
		EnrollToken: stackconfig.Source{KeyVaultSecret: "enrollment-token", Parameter: "EnrollmentToken"},
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ClientID: ids.prov, Name: "acme-provision", Parameter: "EnableProvision"},
			"maintenance": {Enabled: true, ClientID: ids.maint, Name: "acme-maintenance", Parameter: "EnableMaintenance"},
			"deprovision": {Enabled: false, Name: "acme-deprovision", Parameter: "EnableDeprovision"},
			"break_glass": {Enabled: true, ClientID: ids.bg, Name: "acme-break-glass", Parameter: "EnableBreakGlass"},
		},
		Inputs: map[string]stackconfig.Input{
			"admin_email": {Sensitive: true, Parameter: "InputAdminEmail", From: &stackconfig.Source{KeyVaultSecret: "input-admin-email"}},
		},
		Secrets:   map[string]stackconfig.Source{"license_key": {KeyVaultSecret: "secret-license-key", Parameter: "SecretLicenseKey"}},
		Registry:  "acmebyoc.azurecr.io",
		Endpoints: map[string]string{"keyvault": fake.VaultURL()},
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
	return s, ids
}

// TestAzureModeTokens: each job gets a token of its own mode's managed
// identity (for Azure Resource Manager), in its env and its values to
// redact, and never the agent's own or another mode's.
func TestAzureModeTokens(t *testing.T) {
	fake := azurefake.New(t)
	fake.PutSecret("enrollment-token", "tok-1")
	s, ids := azureStack(t, fake, nil)
	ctx := context.Background()

	// The agent's own token (Key Vault) first.
	if _, err := s.EnrollToken(ctx); err != nil {
		t.Fatal(err)
	}
	prov, err := s.Assume(ctx, "provision", "", "job-1", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	maint, err := s.Assume(ctx, "maintenance", "", "job-2", 10*time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	issued := map[string]azurefake.Token{}
	for _, tok := range fake.Issued() {
		issued[tok.ClientID] = tok
	}
	if issued[ids.agent].Resource != azurefake.VaultResource || issued[ids.prov].Resource != azurefake.ManagementResource ||
		issued[ids.maint].Resource != azurefake.ManagementResource {
		t.Fatalf("issued %+v", issued)
	}
	for _, tc := range []struct {
		mode  string
		creds stack.Credentials
		own   string
	}{{"provision", prov, ids.prov}, {"maintenance", maint, ids.maint}} {
		env := tc.creds.Env
		if env["BYOC_AZURE_ACCESS_TOKEN"] != issued[tc.own].Token || env["ARM_CLIENT_ID"] != tc.own || env["AZURE_CLIENT_ID"] != tc.own ||
			env["ARM_TENANT_ID"] != fake.Tenant || env["ARM_SUBSCRIPTION_ID"] != "00000000-0000-0000-0000-0000000000aa" ||
			env["BYOC_AZURE_RESOURCE_GROUP"] != "acme-byoc" {
			t.Errorf("%s env %v", tc.mode, env)
		}
		if !slices.Contains(tc.creds.Secret, issued[tc.own].Token) {
			t.Errorf("%s: its token is not among the values to redact: %v", tc.mode, tc.creds.Secret)
		}
		if !tc.creds.Expires.Equal(issued[tc.own].ExpiresOn) {
			t.Errorf("%s expires %v, issued %v", tc.mode, tc.creds.Expires, issued[tc.own].ExpiresOn)
		}
		for id, tok := range issued {
			if id == tc.own {
				continue
			}
			for k, v := range env {
				if strings.Contains(v, tok.Token) || v == id {
					t.Errorf("%s: %s carries another identity's token or id (%s)", tc.mode, k, id)
				}
			}
		}
	}
	// The preflight check gets a token and hands nothing on.
	if got, err := s.CheckRole(ctx, "maintenance", ""); err != nil || got != "managed identity "+ids.maint {
		t.Errorf("CheckRole: %q, %v", got, err)
	}
}

// TestAzureDisabledMode: a mode turned off has no identity, and its jobs
// are refused naming the template parameter that turns it on; no token
// is asked for.
func TestAzureDisabledMode(t *testing.T) {
	fake := azurefake.New(t)
	s, _ := azureStack(t, fake, nil)
	_, err := s.Assume(context.Background(), "deprovision", "", "job-3", time.Minute, time.Time{})
	var re *stack.RoleError
	if !errors.As(err, &re) || re.Parameter != "EnableDeprovision" {
		t.Fatalf("err %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "EnableDeprovision=true") || !strings.Contains(msg, "az deployment group create") {
		t.Errorf("message %q", msg)
	}
	if len(fake.Issued()) != 0 {
		t.Errorf("tokens issued for a disabled mode: %+v", fake.Issued())
	}
	// Break-glass without a live grant: refused before any token.
	if _, err := s.Assume(context.Background(), "break_glass", "", "job-4", time.Minute, time.Time{}); !errors.As(err, new(*stack.NoGrantError)) {
		t.Errorf("break_glass without grant: %v", err)
	}
	if len(fake.Issued()) != 0 {
		t.Errorf("tokens issued without a grant: %+v", fake.Issued())
	}
}

// TestAzureKeyVault: the enrolment token, sensitive inputs and secrets
// are read from Key Vault with the agent's own identity.
func TestAzureKeyVault(t *testing.T) {
	fake := azurefake.New(t)
	fake.PutSecret("enrollment-token", "enr-123\n")
	fake.PutSecret("input-admin-email", "ops@acme.example")
	fake.PutSecret("secret-license-key", "LK-9")
	s, ids := azureStack(t, fake, nil)
	ctx := context.Background()
	tok, err := s.EnrollToken(ctx)
	if err != nil || tok != "enr-123" {
		t.Fatalf("enrolment token %q, %v", tok, err)
	}
	v, err := s.Values(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Inputs["admin_email"] != "ops@acme.example" || v.Report["admin_email"] != stack.Set || v.Secrets["license_key"] != "LK-9" {
		t.Errorf("values %+v", v)
	}
	if !slices.Contains(v.Sensitive, "ops@acme.example") || !slices.Contains(v.Sensitive, "LK-9") {
		t.Errorf("sensitive %v", v.Sensitive)
	}
	for _, tok := range fake.Issued() {
		if tok.ClientID != ids.agent {
			t.Errorf("Key Vault read with identity %s, not the agent's", tok.ClientID)
		}
	}
}

// TestAzureRefused: what the fake refuses comes back as a clear error:
// the agent's identity without Key Vault's role (403), a secret that is
// not there (404), a mode identity not attached to the VM.
func TestAzureRefused(t *testing.T) {
	ctx := context.Background()
	t.Run("key vault forbids", func(t *testing.T) {
		fake := azurefake.New(t)
		fake.PutSecret("enrollment-token", "x")
		s, _ := azureStack(t, fake, func(c *stackconfig.Config) {
			// An identity attached to the VM but without Key Vault Secrets User.
			id := azurefake.NewID()
			fake.Attach(id)
			c.Azure.AgentClientID = id
		})
		_, err := s.EnrollToken(ctx)
		if err == nil || !strings.Contains(err.Error(), "HTTP 403 Forbidden") || !strings.Contains(err.Error(), "Key Vault secret enrollment-token") ||
			!strings.Contains(err.Error(), "not authorized") || strings.Contains(err.Error(), "\n") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("secret missing", func(t *testing.T) {
		fake := azurefake.New(t)
		s, _ := azureStack(t, fake, nil)
		_, err := s.Values(ctx)
		if err == nil || !strings.Contains(err.Error(), "SecretNotFound") || !strings.Contains(err.Error(), "InputAdminEmail") {
			t.Errorf("err %v", err)
		}
	})
	t.Run("identity detached", func(t *testing.T) {
		fake := azurefake.New(t)
		s, ids := azureStack(t, fake, nil)
		fake.Detach(ids.prov)
		_, err := s.Assume(ctx, "provision", "", "job-5", time.Minute, time.Time{})
		if err == nil || !strings.Contains(err.Error(), "EnableProvision") || !strings.Contains(err.Error(), ids.prov) ||
			!strings.Contains(err.Error(), "Identity not found") || strings.Contains(err.Error(), "\n") {
			t.Errorf("err %v", err)
		}
		t.Log(err)
		if _, err := s.CheckRole(ctx, "provision", ""); err == nil || !strings.Contains(err.Error(), "EnableProvision") {
			t.Errorf("CheckRole: %v", err)
		}
	})
}
