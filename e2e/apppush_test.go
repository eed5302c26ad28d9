package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// An app config pushed with the real byoc binary to a real imsd becomes
// numbered, immutable revisions; an identical push creates nothing; a bad
// config is refused with every problem listed; diff names what changed.
func TestAppPushRevisionsAndDiff(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run
	dir := filepath.Join(t.TempDir(), "acme")
	run(0, "app", "init", dir)

	if out := run(0, "app", "push", dir); !strings.Contains(out, `Pushed app "acme-analytics" revision 1`) {
		t.Fatalf("first push:\n%s", out)
	}
	if out := run(0, "app", "push", dir); !strings.Contains(out, "unchanged: revision 1") {
		t.Fatalf("identical push:\n%s", out)
	}

	edit := func(p, from, to string) {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !strings.Contains(string(b), from) {
			t.Fatalf("%s: %v (looking for %q)", p, err, from)
		}
		os.WriteFile(filepath.Join(dir, p), []byte(strings.Replace(string(b), from, to, 1)), 0o644)
	}
	edit("components/api.toml", `version = "1.4.0"`, `version = "1.5.0"`)
	out := run(0, "app", "push", dir)
	if !strings.Contains(out, "revision 2") || !strings.Contains(out, "~ component api: config.version") {
		t.Fatalf("second push:\n%s", out)
	}

	// A broken config never reaches a revision.
	edit("components/web.toml", `dependencies = ["api"]`, `dependencies = ["apii"]`)
	out = run(1, "app", "push", dir)
	if !strings.Contains(out, `components/web.toml:3: dependencies[0]: no component named "apii" (did you mean "api"?)`) {
		t.Fatalf("bad push:\n%s", out)
	}
	edit("components/web.toml", `dependencies = ["apii"]`, `dependencies = ["api"]`)

	out = run(0, "app", "revisions", "acme-analytics", "-o", "json")
	var revs []struct {
		Number  string
		Version string
	}
	if err := json.Unmarshal([]byte(out), &revs); err != nil || len(revs) != 2 || revs[0].Number != "2" || revs[1].Number != "1" || revs[0].Version != "0.1.0" {
		t.Fatalf("revisions: %v\n%s", err, out)
	}
	if out := run(0, "app", "diff", "acme-analytics", "1", "2"); strings.TrimSpace(out) != "~ component api: config.version" {
		t.Fatalf("diff 1 2:\n%s", out)
	}
	if out := run(0, "app", "diff", "acme-analytics", "2"); strings.TrimSpace(out) != "No changes." {
		t.Fatalf("diff 2 latest:\n%s", out)
	}
	if out := run(1, "app", "diff", "acme-analytics", "1", "7"); !strings.Contains(out, `app "acme-analytics" has no revision 7 (byoc app revisions acme-analytics lists them`) {
		t.Fatalf("diff against a missing revision:\n%s", out)
	}
}
