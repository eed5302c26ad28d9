package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// The customer's control files carry their own proof: a break-glass
// grant written into breakglass.json by hand, as vendor code that reached
// the state dir would, is refused by the real agent, and with it every
// job; so is permissions.json edited by hand. The job's error names the
// file and why; agentd permissions verify says the same, and reset (the
// customer's own command, which signs) brings jobs back.
func TestHandWrittenControlFilesAreRefused(t *testing.T) {
	skipShort(t)
	ims, _, acme, _ := startBreakGlass(t, fast)
	c := ims.Admin()
	grants := filepath.Join(acme.StateDir, "breakglass.json")
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := os.WriteFile(grants, []byte(`{"grants":[{"id":"bg_evil","role":"debugger","requested_by":"vendor","approved_by":"root","approved_at":"2026-11-27T20:00:00Z","expires_at":"`+until+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"break_glass", "provision"} {
		mark := marker()
		j := enqueueMode(t, c, "acme", mode, "echo RAN; sleep "+mark)
		end := cluster.WaitJob(t, c, j.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_SUCCEEDED)
		if end.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.Contains(end.Error, grants+" is not signed") {
			t.Fatalf("a %s job with a hand-written grant: %v %q", mode, end.State, end.Error)
		}
		neverRan(t, c, acme, end, mark)
	}
	// The state the agent reports is everything disabled.
	cluster.Eventually(t, 10*time.Second, "acme reported as disabled", func() bool {
		return agentStatus(t, c, "acme").GetPermissions().GetDisabledAll()
	})
	if out := verifyControls(t, acme.StateDir, 1); !lineWith(out, "REFUSED", "breakglass.json is not signed") {
		t.Fatalf("agentd permissions verify:\n%s", out)
	}
	os.Remove(grants)

	// permissions.json with break_glass flipped by hand.
	path := filepath.Join(acme.StateDir, "permissions.json")
	permissions(t, acme.StateDir, "disable", "break_glass")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(`"break_glass": false`), []byte(`"break_glass": true`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	j := enqueueMode(t, c, "acme", "provision", "echo provisioned")
	end := cluster.WaitJob(t, c, j.Id, 20*time.Second, imsv1.JobState_JOB_STATE_REFUSED, imsv1.JobState_JOB_STATE_FAILED, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.State != imsv1.JobState_JOB_STATE_REFUSED || !strings.Contains(end.Error, path+" was changed after it was signed") {
		t.Fatalf("a job with permissions.json edited by hand: %v %q", end.State, end.Error)
	}
	if out := verifyControls(t, acme.StateDir, 1); !lineWith(out, "REFUSED", "signature does not verify") {
		t.Fatalf("agentd permissions verify:\n%s", out)
	}
	if !strings.Contains(acme.Output(), "refusing the customer's control file") {
		t.Fatalf("the agent's log says nothing of the refusal:\n%s", acme.Output())
	}

	if out := permissions(t, acme.StateDir, "reset"); !lineWith(out, "break_glass", "off") {
		t.Fatalf("agentd permissions reset:\n%s", out)
	}
	verifyControls(t, acme.StateDir, 0)
	j = enqueueMode(t, c, "acme", "provision", "echo provisioned")
	if _, end := follow(t, c, j.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("a job after reset: %v %q", end.State, end.Error)
	}
}

// verifyControls runs agentd permissions verify and checks its exit code.
func verifyControls(t *testing.T, stateDir string, want int) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "permissions", "--state-dir", stateDir, "verify")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != want {
		t.Fatalf("agentd permissions verify: exit %d, want %d\n%s", code, want, out)
	}
	return string(out)
}
