package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// byoc runs the real byoc binary with its own config file.
func byoc(t *testing.T, config string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(cluster.Binaries(t), "byoc"), args...)
	cmd.Env = append(os.Environ(), "BYOC_CONFIG="+config)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run byoc: %v", err)
	}
	return o.String(), e.String(), code
}

// The operator's path, with the real binaries: context, app, install,
// agent, action run --follow, job list -o json.
func TestCLIDrivesARealAgent(t *testing.T) {
	skipShort(t)
	runCLIFlow(t, cluster.Options{LeaseDuration: fast.LeaseDuration, HeartbeatInterval: fast.HeartbeatInterval, SweepInterval: fast.SweepInterval})
}

// The same flow with imsd on PostgreSQL.
func TestCLIDrivesARealAgentOnPostgres(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.DatabaseURL = pgtest.Start(t)
	runCLIFlow(t, opts)
}

func runCLIFlow(t *testing.T, opts cluster.Options) {
	ims := cluster.StartIMS(t, opts)
	config := filepath.Join(t.TempDir(), "byoc.json")
	if _, e, code := byoc(t, config, "context", "add", "test", "--server", ims.URL(), "--token", ims.AdminToken, "--use"); code != 0 {
		t.Fatalf("context add: %s", e)
	}
	if _, e, code := byoc(t, config, "app", "create", "shop"); code != 0 {
		t.Fatalf("app create: %s", e)
	}
	out, e, code := byoc(t, config, "install", "create", "acme", "--app", "shop", "-o", "json")
	if code != 0 {
		t.Fatalf("install create: %s", e)
	}
	var created struct {
		EnrollmentToken struct{ Token string } `json:"enrollmentToken"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.EnrollmentToken.Token == "" {
		t.Fatalf("install create output %q: %v", out, err)
	}
	cluster.StartAgent(t, ims.URL(), created.EnrollmentToken.Token, filepath.Join(t.TempDir(), "agent"))
	waitConnected(t, ims, "acme")

	out, e, code = byoc(t, config, "action", "run", "acme", "--follow", "--", `echo from-cli; exit 3`)
	if code != 3 {
		t.Fatalf("action run --follow exited %d, want the job's exit code 3\nstdout:\n%s\nstderr:\n%s", code, out, e)
	}
	if !strings.Contains(out, "from-cli") {
		t.Fatalf("action run --follow did not print the job's output:\n%s", out)
	}
	out, e, code = byoc(t, config, "job", "list", "--install", "acme", "-o", "json")
	if code != 0 {
		t.Fatalf("job list: %s", e)
	}
	var jobs []struct {
		State    string `json:"state"`
		ExitCode int    `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("job list -o json is not a JSON array: %v\n%s", err, out)
	}
	if len(jobs) != 1 || jobs[0].State != "JOB_STATE_FAILED" || jobs[0].ExitCode != 3 {
		t.Fatalf("job list = %+v, want one failed job with exit code 3", jobs)
	}
	// An unknown token is refused with a message that says so.
	_, e, code = byoc(t, config, "--token", "byoc_op_not_a_token", "job", "list")
	if code != 1 || !strings.Contains(e, "unknown or revoked API token") {
		t.Fatalf("bad token: exit %d, stderr %q", code, e)
	}
}
