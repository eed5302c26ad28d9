package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra/doc"
)

var updateCLIReference = flag.Bool("update-cli-reference", false, "rewrite docs/reference/cli from the command tree (make docs)")

// cliReferenceDir is where the generated CLI reference is committed.
var cliReferenceDir = filepath.Join("..", "..", "docs", "reference", "cli")

// generateCLIReference writes the CLI reference, one Markdown page per
// command (cobra's doc generator), into dir.
func generateCLIReference(t *testing.T, dir string) {
	t.Helper()
	root := commandTree()
	root.DisableAutoGenTag = true // no date: the pages are a function of the commands
	// help is cobra's own, and every page already says --help.
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			root.RemoveCommand(c)
		}
	}
	header := "<!-- Generated from the byoc command tree by `make docs` (tui/cli TestCLIReference); do not edit. -->\n\n"
	if err := doc.GenMarkdownTreeCustom(root, dir, func(string) string { return header }, func(s string) string { return s }); err != nil {
		t.Fatal(err)
	}
}

func mdFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	names, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = b
	}
	return out
}

// TestCLIReference checks that docs/reference/cli is what the command
// tree generates now; with -update-cli-reference (`make docs`) it rewrites
// it.
func TestCLIReference(t *testing.T) {
	tmp := t.TempDir()
	generateCLIReference(t, tmp)
	want := mdFiles(t, tmp)
	if len(want) < 20 {
		t.Fatalf("only %d pages generated", len(want))
	}
	if *updateCLIReference {
		for name := range mdFiles(t, cliReferenceDir) {
			if err := os.Remove(filepath.Join(cliReferenceDir, name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(cliReferenceDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range want {
			if err := os.WriteFile(filepath.Join(cliReferenceDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	got := mdFiles(t, cliReferenceDir)
	var stale []string
	for name, b := range want {
		if g, ok := got[name]; !ok {
			stale = append(stale, name+" (missing)")
		} else if !bytes.Equal(g, b) {
			stale = append(stale, name+" (differs)")
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			stale = append(stale, name+" (no such command)")
		}
	}
	slices.Sort(stale)
	if len(stale) > 0 {
		t.Errorf("docs/reference/cli is out of date: run 'make docs' and commit:\n  %s", strings.Join(stale, "\n  "))
	}
}
