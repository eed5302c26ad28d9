package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// TestLayoutSourceOutsideTheSandbox: a source layout the plugin cannot
// see is refused naming the flag that shows it, not reported as a tag
// that was not found (what `make demo` printed once the sandbox hid its
// layout).
func TestLayoutSourceOutsideTheSandbox(t *testing.T) {
	root := t.TempDir()
	missing := "oci:" + filepath.Join(root, "hidden") + ":1.0"
	ref, err := ocicopy.ParseReference(missing)
	if err != nil {
		t.Fatal(err)
	}
	err = checkLayoutSource(missing, ref)
	if err == nil || !strings.Contains(err.Error(), "--sandbox-read-only "+root) {
		t.Fatalf("a missing layout: %v, want an error naming --sandbox-read-only %s", err, root)
	}

	if err := os.MkdirAll(filepath.Join(root, "web"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "web", "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	present := "oci:" + filepath.Join(root, "web") + ":1.0"
	if ref, err = ocicopy.ParseReference(present); err != nil {
		t.Fatal(err)
	}
	if err := checkLayoutSource(present, ref); err != nil {
		t.Fatalf("a layout that is there: %v", err)
	}
	remote, _ := ocicopy.ParseReference("registry.example.com/acme/web:1.0")
	if err := checkLayoutSource("registry.example.com/acme/web:1.0", remote); err != nil {
		t.Fatalf("a registry source: %v", err)
	}
}
