package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/schema/app/load"
)

// GetInstallStack answers with the example app.
func (f *fakeOperator) GetInstallStack(_ context.Context, req *connect.Request[imsv1.GetInstallStackRequest]) (*connect.Response[imsv1.GetInstallStackResponse], error) {
	out := &imsv1.GetInstallStackResponse{Install: req.Msg.GetInstall(), App: "acme-analytics", AppRevision: 3, SigningKeyId: "kid123"}
	for p, b := range load.ExampleFiles() {
		out.Files = append(out.Files, &imsv1.AppFile{Path: p, Content: b})
	}
	return connect.NewResponse(out), nil
}

func TestInstallStack(t *testing.T) {
	setup(t)

	r := mustRun(t, "install", "stack", "demo", "--param", "EnableBreakGlass=true")
	for _, want := range []string{`"AWSTemplateFormatVersion"`, `kid123`, `"InputAdminEmail"`, `"Default": "true"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("template lacks %s", want)
		}
	}
	file := filepath.Join(t.TempDir(), "stack.json")
	mustRun(t, "install", "stack", "demo", "-o", file)
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), `"AgentInstance"`) {
		t.Errorf("-o %s: %v", file, err)
	}

	dir := filepath.Join(t.TempDir(), "local")
	r = mustRun(t, "install", "stack", "demo", "--format", "local", "-o", dir, "--ims-url", "http://127.0.0.1:9", "--param", "SecretLicenseKey=lk-1")
	if !strings.Contains(r.stdout, "enroll.token") {
		t.Errorf("output: %s", r.stdout)
	}
	for name, mode := range map[string]os.FileMode{"stack.json": 0o600, "agentd.sh": 0o755, "secrets.env": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %v", name, err, fi.Mode().Perm(), mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stack.json")); !strings.Contains(string(b), `"ims": "http://127.0.0.1:9"`) {
		t.Errorf("stack.json:\n%s", b)
	}

	azFile := filepath.Join(t.TempDir(), "azure.json")
	r = mustRun(t, "install", "stack", "demo", "--format", "azure", "-o", azFile, "--template-url", "https://example.com/t/azure.json")
	if b, err := os.ReadFile(azFile); err != nil || !strings.Contains(string(b), `"Microsoft.ManagedIdentity/userAssignedIdentities"`) || !strings.Contains(string(b), "kid123") {
		t.Errorf("--format azure -o %s: %v", azFile, err)
	}
	if b, err := os.ReadFile(strings.TrimSuffix(azFile, ".json") + ".bicep"); err != nil || !strings.Contains(string(b), "resource identity_agent 'Microsoft.ManagedIdentity/userAssignedIdentities@") {
		t.Errorf("--format azure -o %s: no Bicep source beside it: %v", azFile, err)
	}
	bicepFile := filepath.Join(t.TempDir(), "stack.bicep")
	mustRun(t, "install", "stack", "demo", "--format", "bicep", "-o", bicepFile)
	if b, err := os.ReadFile(bicepFile); err != nil || !strings.Contains(string(b), "param EnableBreakGlass bool = false") {
		t.Errorf("--format bicep -o %s: %v\n%s", bicepFile, err, b)
	}
	for _, want := range []string{"az deployment group create --resource-group byoc-demo --template-file " + azFile,
		"https://portal.azure.com/#create/Microsoft.Template/uri/https%3A%2F%2Fexample.com%2Ft%2Fazure.json"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}

	gcpDir := filepath.Join(t.TempDir(), "gcp")
	r = mustRun(t, "install", "stack", "demo", "--format", "gcp", "-o", gcpDir, "--param", "EnableBreakGlass=true")
	if b, err := os.ReadFile(filepath.Join(gcpDir, "main.tf")); err != nil || !strings.Contains(string(b), `resource "google_service_account" "mode_provision"`) ||
		!strings.Contains(string(b), "kid123") || !strings.Contains(string(b), "variable \"enable_break_glass\" {\n  type        = bool\n  description = \"Whether the break_glass permission mode has a role: false removes it, and the agent fails every break_glass job naming this parameter.\"\n  default     = true") {
		t.Errorf("--format gcp -o %s: %v\n%s", gcpDir, err, b)
	}
	if !strings.Contains(r.stdout, "gcloud infra-manager deployments apply projects/PROJECT/locations/REGION/deployments/byoc-demo") || !strings.Contains(r.stdout, "--local-source="+gcpDir) {
		t.Errorf("output: %s", r.stdout)
	}

	for _, args := range [][]string{
		{"install", "stack", "demo", "--format", "terraform"},
		{"install", "stack", "demo", "--format", "gcp", "--param", "EnableEverything=true"},
		{"install", "stack", "demo", "--template-url", "https://example.com/t.json"},
		{"install", "stack", "demo", "--format", "azure", "--template-url", "http://example.com/t.json"},
		{"install", "stack", "demo", "--param", "EnableEverything=true"},
		{"install", "stack", "demo", "--param", "novalue"},
	} {
		if r := byoc(t, args...); r.code != exitUsage {
			t.Errorf("byoc %v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
}
