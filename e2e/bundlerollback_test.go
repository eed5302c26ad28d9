package e2e

import (
	"bytes"
	"os"
	"os/exec"
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
	// It is imported from a read-only medium (a USB stick): the import
	// stages in the state directory and writes nothing beside it.
	stick := t.TempDir()
	fresh := filepath.Join(stick, "fresh.tar")
	if out := cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", fresh); !strings.Contains(out, "update workflow of 1 job") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	for _, again := range []bool{false, true} {
		out, code := agentdBundleReadOnly(t, state, stick, "import", fresh)
		want := "  db" + strings.Repeat(" ", 28) + " succeeded"
		if again {
			want = "succeeded before"
		}
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("the fresh bundle (again: %v): exit %d:\n%s", again, code, out)
		}
		if ents, err := os.ReadDir(stick); err != nil || len(ents) != 1 {
			t.Fatalf("the import wrote beside the bundle: %v, %v", ents, err)
		}
		if ents, err := os.ReadDir(filepath.Join(state, "staging")); err != nil || len(ents) != 0 {
			t.Fatalf("the import left its staging folder: %v, %v", ents, err)
		}
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

// agentdBundleReadOnly is agentdBundle with the directory dir read-only
// for agentd, as a USB stick mounted so is: its mode 0555, or, for root
// (whom modes do not stop), a read-only bind mount of it in a mount
// namespace of agentd's own (unshare -m).
func agentdBundleReadOnly(t *testing.T, state, dir string, args ...string) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		return agentdBundle(t, state, args...)
	}
	const mountRO = `mount --bind "$0" "$0"; mount -o remount,bind,ro "$0"; ! touch "$0/.probe" 2>/dev/null; `
	if b, err := exec.Command("unshare", "-m", "sh", "-ec", mountRO, dir).CombinedOutput(); err != nil {
		t.Logf("root, and %s cannot be mounted read-only here (%v: %s): the import runs with it writable", dir, err, b)
		return agentdBundle(t, state, args...)
	}
	full := []string{"-m", "sh", "-ec", mountRO + `exec "$@"`, dir,
		filepath.Join(cluster.Binaries(t), "agentd"), "bundle", args[0], "--state-dir", state, "--ims", "http://127.0.0.1:1"}
	full = append(full, args[1:]...)
	cmd := exec.Command("unshare", full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}
