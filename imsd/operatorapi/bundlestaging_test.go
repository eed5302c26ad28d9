package operatorapi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/byoc-dev/byoc/imsd/auth"
)

// An imsd killed while it checked a results file left the file's
// unpacked contents in its staging folder; the next results import (by
// any imsd on the host) removes it, and leaves alone the folder of an
// import still running. An import leaves nothing of its own behind.
// Before, each check unpacked into a folder of its own that only the
// check itself removed.
func TestImportResultsRemovesWhatAKilledImportLeft(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a := auth.NewSortableID("bdl_", t0)
	files := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{ownOnly: true}, a)

	left := filepath.Join(tmp, "byoc-results-123456")
	if err := os.MkdirAll(filepath.Join(left, "r"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "r", "journal.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := resultsStaging.New(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	if _, err := importResults(s, files[a]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !os.IsNotExist(err) {
		t.Errorf("the killed import's folder is still there: %v", err)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(live.Path) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left in the temporary folder: %v, want only the running import's %s", names, filepath.Base(live.Path))
	}
}
