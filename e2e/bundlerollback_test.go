package e2e

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// A bundle made before work the agent then did online is refused: its
// jobs are signed, unexpired and never run here, so importing it would
// roll the install back to what imsd wanted when it made the bundle. The
// refusal names the bundle, its time and the newer job, and a fresh
// bundle imports (and, imported again, resumes as before).
func TestBundleOlderThanOnlineWorkRefused(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	app := func(v string) map[string]string {
		return map[string]string{
			"app.toml":           "name = \"shop\"\n",
			"components/db.toml": "type = \"action\"\n[config]\nsteps = [{ name = \"db\", script = \"echo " + v + "; echo v=" + v + " >> $BYOC_OUTPUTS\" }]\n",
			"installs/acme.toml": "",
		}
	}
	pushed := cli.PushApp(app("v1"))
	state := t.TempDir()
	ag := cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), state)
	waitConnected(t, ims, "acme")

	// Made for the customer to carry in; then the install got its
	// provision online after all.
	dir := t.TempDir()
	old := filepath.Join(dir, "old.tar")
	if out := cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", old); !strings.Contains(out, "provision workflow of 1 job") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded: 1/1 done") {
		t.Fatalf("provision:\n%s", out)
	}
	ag.Stop()

	out, code := agentdBundle(t, state, "import", old)
	if code != 1 || !regexp.MustCompile(`bundle bdl_[0-9a-v]{26} was made by imsd at \S+, before job job_[0-9a-v]{26} \(made at \S+\), which this agent accepted already`).MatchString(out) ||
		!strings.Contains(out, "make a fresh bundle (byoc bundle create)") || !strings.Contains(out, "nothing was written") {
		t.Fatalf("the older bundle after online work: exit %d:\n%s", code, out)
	}

	// A fresh bundle, of a new revision, imports; and again, it resumes
	// (nothing runs twice).
	cluster.WriteApp(t, pushed.Dir, app("v2"))
	cli.Run(0, "app", "push", pushed.Dir, "--no-deploy")
	fresh := filepath.Join(dir, "fresh.tar")
	if out := cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", fresh); !strings.Contains(out, "update workflow of 1 job") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	if out, code := agentdBundle(t, state, "import", fresh); code != 0 || !strings.Contains(out, "  db"+strings.Repeat(" ", 28)+" succeeded") {
		t.Fatalf("the fresh bundle: exit %d:\n%s", code, out)
	}
	if out, code := agentdBundle(t, state, "import", fresh); code != 0 || !strings.Contains(out, "succeeded before") {
		t.Fatalf("the fresh bundle again: exit %d:\n%s", code, out)
	}
	// The older one stays refused.
	if out, code := agentdBundle(t, state, "import", old); code != 1 || !strings.Contains(out, "was made before bundle") {
		t.Fatalf("the older bundle after the fresh one: exit %d:\n%s", code, out)
	}

	// Its results go back tied to the bundle imsd signed: a file that
	// claims another revision (signed by the agent's own key, as a
	// customer holding it could) is refused; the file as exported
	// imports.
	results := filepath.Join(t.TempDir(), "results.tar")
	if out, code := agentdBundle(t, state, "export-results", "-o", results); code != 0 {
		t.Fatalf("export-results: exit %d:\n%s", code, out)
	}
	res := tarEntry(t, results, "results.json")
	forged := resign(t, state, results, map[string][]byte{"results.json": bytes.Replace(res, []byte(`"revision": 2`), []byte(`"revision": 1`), 1)})
	if _, stderr, code := cli.Exec("bundle", "import-results", forged); code == 0 || !strings.Contains(stderr, "results.json: names revision 1 (update workflow), and bundle bdl_") ||
		!strings.Contains(stderr, "is of revision 2 (update workflow), as imsd signed it") {
		t.Fatalf("results claiming another revision: exit %d: %s", code, stderr)
	}
	if out := cli.Run(0, "bundle", "import-results", results); !strings.Contains(out, " succeeded, 1 job") {
		t.Fatalf("import-results printed:\n%s", out)
	}
}
