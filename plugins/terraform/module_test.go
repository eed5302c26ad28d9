package terraform

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

func tarGz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := strings.Repeat("x", int(h.Size))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// A module layer is unpacked only into the module's directory: names that
// leave it, links and devices are refused, whoever packed the layer.
func TestUntarModuleRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		entry tar.Header
		want  string
	}{
		{"parent", tar.Header{Name: "../evil.tf", Typeflag: tar.TypeReg, Size: 1}, "not a relative path inside the module"},
		{"absolute", tar.Header{Name: "/etc/evil.tf", Typeflag: tar.TypeReg, Size: 1}, "not a relative path inside the module"},
		{"deep parent", tar.Header{Name: "a/../../evil.tf", Typeflag: tar.TypeReg, Size: 1}, "not a relative path inside the module"},
		{"symlink", tar.Header{Name: "link.tf", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "only files and directories"},
		{"hard link", tar.Header{Name: "link.tf", Typeflag: tar.TypeLink, Linkname: "main.tf"}, "only files and directories"},
		{"device", tar.Header{Name: "dev", Typeflag: tar.TypeChar}, "only files and directories"},
		// What would change where providers come from, or what the
		// reviewed files do.
		{"providers pre-seeded", tar.Header{Name: ".terraform/providers/registry.terraform.io/hashicorp/null/3.2.4/linux_amd64/terraform-provider-null", Typeflag: tar.TypeReg, Size: 1}, `entry ".terraform/providers/registry.terraform.io/hashicorp/null/3.2.4/linux_amd64/terraform-provider-null": .terraform/ is Terraform's working directory`},
		{"terraform dir", tar.Header{Name: ".terraform/", Typeflag: tar.TypeDir}, `entry ".terraform": .terraform/`},
		{"nested terraform dir", tar.Header{Name: "modules/net/.terraform/modules/modules.json", Typeflag: tar.TypeReg, Size: 1}, `.terraform/ is Terraform's working directory`},
		{"local providers", tar.Header{Name: "terraform.d/plugins/x", Typeflag: tar.TypeReg, Size: 1}, `entry "terraform.d/plugins/x": terraform.d/`},
		{"override", tar.Header{Name: "override.tf", Typeflag: tar.TypeReg, Size: 1}, `entry "override.tf": override files are refused`},
		{"named override", tar.Header{Name: "zzz_override.tf", Typeflag: tar.TypeReg, Size: 1}, `entry "zzz_override.tf": override files are refused`},
		{"json override", tar.Header{Name: "sub/backend_override.tf.json", Typeflag: tar.TypeReg, Size: 1}, `entry "sub/backend_override.tf.json": override files are refused`},
		{"too deep", tar.Header{Name: strings.Repeat("d/", tfmodule.MaxDepth) + "main.tf", Typeflag: tar.TypeReg, Size: 1}, fmt.Sprintf("33 names deep, over the limit of %d", tfmodule.MaxDepth)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := t.TempDir()
			err := untarModule(tarGz(t, tt.entry), dst)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("untar %q: %v, want %q", tt.entry.Name, err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "evil.tf")); err == nil {
				t.Fatal("a file was written outside the module")
			}
		})
	}
	// A module unpacks into the directory it is given, with its lock file
	// (which only narrows what init takes from the mirror) and files
	// whose names merely contain "override".
	dst := t.TempDir()
	if err := untarModule(tarGz(t, tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "sub/main.tf", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		tar.Header{Name: ".terraform.lock.hcl", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		tar.Header{Name: "override_rules.tf", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		tar.Header{Name: "no_override.tf.txt", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}), dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "sub", "main.tf")); err != nil || string(b) != "xxx" {
		t.Fatalf("sub/main.tf: %q, %v", b, err)
	}
}

// A layer of many small entries is refused at MaxEntries, however few
// bytes it has (a 2 MB layer of 300,001 empty files was unpacked whole),
// and the entry that went over is named.
func TestUntarModuleEntryLimit(t *testing.T) {
	var entries []tar.Header
	for i := range tfmodule.MaxEntries + 1 {
		entries = append(entries, tar.Header{Name: fmt.Sprintf("f%05d.tf", i), Typeflag: tar.TypeReg, Mode: 0o644})
	}
	layer := tarGz(t, entries...)
	dst := t.TempDir()
	err := untarModule(layer, dst)
	want := fmt.Sprintf(`entry "f%05d.tf": the module has more than %d entries (files and directories), the limit`, tfmodule.MaxEntries, tfmodule.MaxEntries)
	if err == nil || err.Error() != want {
		t.Fatalf("untar of %d empty files (%d bytes): %v, want %q", len(entries), len(layer), err, want)
	}
	// Refused before a file was written.
	if left, _ := os.ReadDir(dst); len(left) != 0 {
		t.Fatalf("a refused layer left %d entries behind", len(left))
	}
	// Exactly MaxEntries is a module.
	if err := tfmodule.CheckLayer(tarGz(t, entries[:tfmodule.MaxEntries]...)); err != nil {
		t.Fatal(err)
	}
}

// Packing refuses what unpacking would, so a vendor hears of it at push.
func TestPackModuleRefuses(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`resource "terraform_data" "x" {}`), 0o644)
	os.WriteFile(filepath.Join(dir, "backend_override.tf"), []byte(`terraform {}`), 0o644)
	if _, err := PackModule(dir); err == nil || !strings.Contains(err.Error(), `entry "backend_override.tf": override files are refused`) {
		t.Fatalf("pack with an override file: %v", err)
	}
	// A development module_dir too, naming the directory.
	want := "module_dir " + dir + `: entry "backend_override.tf": override files are refused`
	if err := copyModuleDir(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("module_dir with an override file: %v, want %q", err, want)
	}
}

// PackModule is a function of the files: the same directory packs to the
// same bytes, leaving out .terraform and state files, and the artifact's
// digest does not depend on when it was pushed.
func TestPackModuleDeterministic(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`resource "terraform_data" "x" {}`), 0o644)
	os.MkdirAll(filepath.Join(dir, ".terraform", "providers"), 0o755)
	os.WriteFile(filepath.Join(dir, ".terraform", "providers", "big"), []byte("binary"), 0o644)
	os.WriteFile(filepath.Join(dir, "terraform.tfstate"), []byte("{}"), 0o644)
	a, err := PackModule(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.Chtimes(filepath.Join(dir, "main.tf"), time.Unix(12345, 0), time.Unix(12345, 0))
	b, _ := PackModule(dir)
	if !bytes.Equal(a, b) {
		t.Fatal("packing the same files twice gave different bytes")
	}
	out := t.TempDir()
	if err := untarModule(a, out); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 1 || entries[0].Name() != "main.tf" {
		t.Fatalf("packed %v, want main.tf only", entries)
	}
	d1, err := PushModule(t.Context(), dir, "oci:"+t.TempDir(), "m:1", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := PushModule(t.Context(), dir, "oci:"+t.TempDir(), "m:2", ocicopy.Credentials{})
	if d1 != d2 {
		t.Fatalf("digests %s and %s of the same module", d1, d2)
	}
}

// A module directory holding a symbolic link (out of the module, or even
// within it) is refused when packed or copied, naming the link: its
// target could be any file of the vendor's machine, and leaving it out
// would pack another module than the directory holds.
func TestPackModuleRefusesSymlinks(t *testing.T) {
	for name, target := range map[string]string{"outside": "/etc/passwd", "parent": "../secret.tf", "inside": "main.tf"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`resource "terraform_data" "x" {}`), 0o644)
		os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
		if err := os.Symlink(target, filepath.Join(dir, "sub", "link.tf")); err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(dir, "sub", "link.tf") + ": a symbolic link; a module holds only regular files and directories"
		if _, err := PackModule(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: pack: %v; want %q", name, err, want)
		}
		if err := copyModuleDir(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: copy: %v; want %q", name, err, want)
		}
	}
}

// A reference to something that is not a module is refused, naming what
// it is.
func TestFetchNotAModule(t *testing.T) {
	reg := t.TempDir()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.tf"), []byte("# nothing"), 0o644)
	dg, err := PushModule(t.Context(), dir, "oci:"+reg, "modules/x:1", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	zero := "sha256:" + strings.Repeat("0", 64)
	_, err = fetchModule(t.Context(), "oci:"+reg, nil, "modules/x@"+zero, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `resolve `+zero+` in `) {
		t.Fatalf("unknown digest: %v", err)
	}
	_, err = fetchModule(t.Context(), "", nil, "modules/x@"+dg, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "this agent has no install registry") {
		t.Fatalf("no registry: %v", err)
	}
	_, err = fetchModule(t.Context(), "oci:"+reg, nil, "Modules/X", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "want lowercase path segments") {
		t.Fatalf("bad repository: %v", err)
	}
}

// TestModuleRefRefusesTags: a module is named by digest; a tag (or a bare
// repository, which means latest) can move under the install and is a
// config error naming the field's value and how to get the digest.
func TestModuleRefRefusesTags(t *testing.T) {
	zero := "sha256:" + strings.Repeat("0", 64)
	for _, ok := range []string{"modules/site@" + zero, "oci:/var/lib/byoc/registry/modules/site@" + zero} {
		if err := checkModuleRef(ok); err != nil {
			t.Errorf("checkModuleRef(%q) = %v", ok, err)
		}
	}
	for ref, want := range map[string]string{
		"modules/site:1.0.0": `module "modules/site:1.0.0": names the mutable tag "1.0.0"; reference the module by digest, modules/site@sha256:HEX (` + "`agentd module push DIR modules/site:1.0.0`" + ` prints the digest`,
		"modules/site":       `module "modules/site": names the mutable tag "latest"`,
	} {
		err := checkModuleRef(ref)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "module_dir") {
			t.Errorf("checkModuleRef(%q) = %v, want %q and a word on module_dir", ref, err, want)
		}
	}
	if _, _, _, err := openModule(t.Context(), "oci:"+t.TempDir(), ocicopy.Credentials{}, "modules/site:1.0.0"); err == nil || !strings.Contains(err.Error(), "mutable tag") {
		t.Errorf("openModule by tag: %v, want the tag refused", err)
	}
}
