package pluginhost_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// InstallBinary puts a binary in a directory named by its checksum, whole
// (no temporary left), 0755; installing the same bytes again, also at
// once from several goroutines, keeps it; PruneInstalled removes the
// type's other versions only.
func TestInstallBinary(t *testing.T) {
	root := filepath.Join(t.TempDir(), "plugins")
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Go(func() { paths[i], _, errs[i] = pluginhost.InstallBinary(root, "kv", []byte("v1")) })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("concurrent installs: %q %v", paths, errs)
		}
	}
	p1 := paths[0]
	if fi, err := os.Stat(p1); err != nil || fi.Mode().Perm() != 0o755 || filepath.Base(p1) != "byoc-plugin-kv" {
		t.Fatalf("installed %s: %v %v", p1, fi, err)
	}
	p2, sum2, err := pluginhost.InstallBinary(root, "kv", []byte("v2"))
	if err != nil || filepath.Base(filepath.Dir(p2)) != "kv-"+sum2 {
		t.Fatalf("v2: %s %s %v", p2, sum2, err)
	}
	other, _, err := pluginhost.InstallBinary(root, "kv-x", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pluginhost.PruneInstalled(root, "kv", p2); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != filepath.Base(filepath.Dir(p2)) || names[1] != filepath.Base(filepath.Dir(other)) {
		t.Fatalf("after prune: %q", names)
	}
	// Other bytes where v2 belongs are replaced.
	if err := os.WriteFile(p2, []byte("changed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, _, err := pluginhost.InstallBinary(root, "kv", []byte("v2")); err != nil || p != p2 {
		t.Fatalf("reinstall over changed bytes: %s %v", p, err)
	}
	if b, _ := os.ReadFile(p2); string(b) != "v2" {
		t.Fatalf("after reinstall: %q", b)
	}
	if _, _, err := pluginhost.InstallBinary(root, "../x", []byte("v1")); err == nil {
		t.Fatal("a type with a path was installed")
	}
}
