package e2e

import (
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The results of a bundle made before imsd key rotate import after it:
// the agent (a real agentd, offline) seals the bundle's jobs back to the
// key that signed them, and the rotation (the real imsd binary) kept
// that key in KEYFILE.previous; the imsd it was rotated under makes no
// more bundles with it. imsd uses it for auth.PreviousKeyUse
// after the rotation only: past that, it logs that it no longer uses
// the key and refuses the results, naming it, recording nothing.
//
// The agent is stopped once enrolled, so the bundle's provision is the
// install's only workflow (import-results refuses while another runs).
func TestBundleResultsAfterKeyRotate(t *testing.T) {
	skipShort(t)
	offset := &atomic.Int64{}
	logs := &syncbuf.Buffer{}
	o := fast
	o.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ims, cli, state := shopOffline(t, o)

	file := filepath.Join(t.TempDir(), "bundle.tar")
	if out := cli.Run(0, "bundle", "create", "shop", "--install", "acme", "-o", file); !strings.Contains(out, "provision workflow of 1 jobs") {
		t.Fatalf("bundle create printed:\n%s", out)
	}
	oldID := ims.SigningKey().ID
	keyFile := filepath.Join(ims.DataDir, "signing.key")

	// Rotated under the running imsd: it makes no more bundles with the
	// old key (their results would outlive the old key's use).
	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "imsd"), "key", "rotate", "--data-dir", ims.DataDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), oldID+" -> ") || !strings.Contains(string(out), "the old key kept in "+auth.PreviousFile(keyFile)+", for offline results only, until ") {
		t.Fatalf("imsd key rotate: %v\n%s", err, out)
	}
	if _, stderr, code := cli.Exec("bundle", "create", "shop", "--install", "acme", "-o", file+".late"); code == 0 || !strings.Contains(stderr, "this imsd signs with key "+oldID) || !strings.Contains(stderr, "restart imsd to sign bundles with the new key") {
		t.Fatalf("bundle create after imsd key rotate, imsd not restarted: exit %d: %s", code, stderr)
	}
	ims.Stop()

	// At the customer, with no route to imsd.
	imp, code := agentdBundle(t, state, "import", file)
	if code != 0 || !strings.Contains(imp, "  hello"+strings.Repeat(" ", 30-len("hello"))+" succeeded") {
		t.Fatalf("import: exit %d:\n%s\nresults:\n%s", code, imp, readResults(t, state))
	}
	results := filepath.Join(t.TempDir(), "results.tar")
	if out, code := agentdBundle(t, state, "export-results", "-o", results); code != 0 {
		t.Fatalf("export-results: exit %d:\n%s", code, out)
	}

	// An imsd whose clock is past the old key's use: it says so at
	// start, and refuses the results, recording nothing.
	offset.Store(int64(auth.PreviousKeyUse + time.Hour))
	ims.Restart(t)
	newID := ims.SigningKey().ID
	if newID == oldID {
		t.Fatal("imsd still signs with the old key")
	}
	if l := logs.String(); !strings.Contains(l, "no longer used") || !strings.Contains(l, "key="+oldID) {
		t.Fatalf("imsd's log says nothing of the previous key it no longer uses:\n%s", l)
	}
	_, stderr, code := cli.Exec("bundle", "import-results", results)
	if code == 0 || !strings.Contains(stderr, "nothing was recorded") || !strings.Contains(stderr, "which this imsd no longer uses: "+oldID+" (replaced ") {
		t.Fatalf("import-results past the old key's use: exit %d: %s", code, stderr)
	}
	if jobs := installJobs(t, ims.Admin()); len(jobs) != 0 {
		t.Fatalf("a refused import recorded %d jobs", len(jobs))
	}

	// Within it: imported, as if the agent had been online.
	offset.Store(0)
	ims.Restart(t)
	if l := logs.String(); !strings.Contains(l, "a previous signing key opens the results of offline bundles it signed") {
		t.Fatalf("imsd's log says nothing of the previous key it uses:\n%s", l)
	}
	if out := cli.Run(0, "bundle", "import-results", results); !strings.Contains(out, " succeeded, 1 jobs; the agent's journal verified") {
		t.Fatalf("import-results printed:\n%s", out)
	}
	jobs := installJobs(t, ims.Admin())
	if len(jobs) != 1 || jobs[0].State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("imsd's jobs of the install: %v, want the bundle's one, succeeded", jobs)
	}
	if l := logs.String(); !strings.Contains(l, "opened with the previous key") {
		t.Fatalf("imsd's log says nothing of the previous key that opened the results:\n%s", l)
	}
	if got := cli.Run(0, "install", "get", "acme", "-o", "json"); !strings.Contains(got, `"state": "active"`) && !strings.Contains(got, "INSTALL_STATE_ACTIVE") {
		t.Fatalf("install get after the results:\n%s", got)
	}
}
