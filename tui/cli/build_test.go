package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/byoc-dev/byoc/plugins/terraform/tfmodule"
)

// byoc build package --kind terraform leaves out a local run's
// .terraform directory and state files, as agentd module push does, so
// a module packaged from a directory where terraform init ran is one the
// build agent and the install agents take; --kind helm packs every file.
func TestTarDirTerraform(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"main.tf":             `resource "terraform_data" "x" {}`,
		".terraform.lock.hcl": "# lock\n",
		".terraform/providers/registry.terraform.io/hashicorp/null/3.2.4/linux_amd64/terraform-provider-null": "binary",
		"terraform.tfstate":        "{}",
		"terraform.tfstate.backup": "{}",
		"modules/net/main.tf":      "",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archive, err := tarDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".terraform.lock.hcl", "main.tf", "modules/", "modules/net/", "modules/net/main.tf"}
	if got := tarNames(t, archive); !slices.Equal(got, want) {
		t.Fatalf("packaged %q, want %q", got, want)
	}
	if err := tfmodule.CheckLayer(archive); err != nil {
		t.Fatalf("the build agent would refuse it: %v", err)
	}
	all, err := tarDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := tarNames(t, all); !slices.Contains(got, "terraform.tfstate") || !slices.Contains(got, ".terraform/") {
		t.Fatalf("--kind helm left files out: %q", got)
	}
}

func tarNames(t *testing.T, tgz []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			slices.Sort(out)
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name)
	}
}
