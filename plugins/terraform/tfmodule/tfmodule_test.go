package tfmodule_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The same files give the same digest wherever they are; state files and
// .terraform are left out; the tag names the pushed manifest.
func TestPushIsDeterministic(t *testing.T) {
	files := map[string]string{"main.tf": `variable "x" {}`, "sub/out.tf": `output "y" { value = 1 }`}
	a := writeModule(t, files)
	b := writeModule(t, files)
	if err := os.WriteFile(filepath.Join(b, "terraform.tfstate"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(b, ".terraform", "providers"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	da, err := tfmodule.Push(t.Context(), a, "oci:"+root, "modules/net:1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	db, err := tfmodule.Push(t.Context(), b, root, "modules/net:1.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if da != db || !strings.HasPrefix(da, "sha256:") {
		t.Errorf("digests %s and %s: want the same", da, db)
	}
	idx, err := os.ReadFile(filepath.Join(root, "modules", "net", "index.json"))
	if err != nil || !strings.Contains(string(idx), `"1.0.1"`) || !strings.Contains(string(idx), da) {
		t.Errorf("index.json = %s, %v", idx, err)
	}
}

func TestPushRefusals(t *testing.T) {
	dir := writeModule(t, map[string]string{"main.tf": ""})
	for _, tc := range []struct{ registry, ref, want string }{
		{"oci:" + t.TempDir(), "modules/net@sha256:" + strings.Repeat("a", 64), "push to a tag, not a digest"},
		{"oci:" + t.TempDir(), "Modules/Net:1", `repository "Modules/Net": want lowercase path segments`},
		{"registry.example.com", "modules/net:1", "reads modules from an OCI image layout (oci:DIR) only"},
	} {
		if _, err := tfmodule.Push(t.Context(), dir, tc.registry, tc.ref); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Push(%s, %s) = %v, want %q", tc.registry, tc.ref, err, tc.want)
		}
	}
}
