package tfmodule_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

func layer(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(make([]byte, h.Size))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func file(name string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}
}

// CheckLayer, which the build agent runs on a module it packages, refuses
// what an install agent would refuse to unpack, naming the entry; a
// packed module directory passes.
func TestCheckLayer(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`resource "terraform_data" "x" {}`), 0o644)
	os.WriteFile(filepath.Join(dir, ".terraform.lock.hcl"), []byte("# lock\n"), 0o644)
	packed, err := tfmodule.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tfmodule.CheckLayer(packed); err != nil {
		t.Fatalf("a packed module: %v", err)
	}
	var many []tar.Header
	for i := range tfmodule.MaxEntries + 1 {
		many = append(many, tar.Header{Name: fmt.Sprintf("f%05d", i), Typeflag: tar.TypeReg})
	}
	for name, tc := range map[string]struct {
		layer []byte
		want  string
	}{
		"providers":    {layer(t, file("main.tf"), file(".terraform/providers/p")), `entry ".terraform/providers/p": .terraform/ is Terraform's working directory`},
		"override":     {layer(t, file("main.tf"), file("backend_override.tf")), `entry "backend_override.tf": override files are refused`},
		"json":         {layer(t, file("override.tf.json")), `entry "override.tf.json": override files are refused`},
		"local plugin": {layer(t, file("terraform.d/plugins/x")), `entry "terraform.d/plugins/x": terraform.d/`},
		"symlink":      {layer(t, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}), `entry "l": type '2': only files and directories`},
		"parent":       {layer(t, file("../x.tf")), `entry "../x.tf": not a relative path inside the module`},
		"deep":         {layer(t, file(strings.Repeat("d/", tfmodule.MaxDepth)+"x.tf")), "33 names deep, over the limit of 32"},
		"many":         {layer(t, many...), `entry "f10000": the module has more than 10000 entries (files and directories), the limit`},
		"bytes":        {layer(t, tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: tfmodule.MaxBytes / 2}, tar.Header{Name: "b", Typeflag: tar.TypeReg, Size: tfmodule.MaxBytes/2 + 1}), `entry "b": the module's files come to more than 67108864 bytes, the limit`},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tfmodule.CheckLayer(tc.layer); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckLayer: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestIsOverrideFile(t *testing.T) {
	for name, want := range map[string]bool{
		"override.tf": true, "override.tf.json": true, "a_override.tf": true, "backend_override.tf.json": true,
		"main.tf": false, "overrides.tf": false, "override_a.tf": false, "a_override.tfvars": false, "override.tf.bak": false,
	} {
		if got := tfmodule.IsOverrideFile(name); got != want {
			t.Errorf("IsOverrideFile(%q) = %v, want %v", name, got, want)
		}
	}
}
