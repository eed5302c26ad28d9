package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

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
	cli := cluster.NewCLI(t, ims)
	if _, e, code := cli.Exec("app", "create", "shop"); code != 0 {
		t.Fatalf("app create: %s", e)
	}
	out, e, code := cli.Exec("install", "create", "acme", "--app", "shop", "-o", "json")
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

	out, e, code = cli.Exec("action", "run", "acme", "--follow", "--", `echo from-cli; exit 3`)
	if code != 3 {
		t.Fatalf("action run --follow exited %d, want the job's exit code 3\nstdout:\n%s\nstderr:\n%s", code, out, e)
	}
	if !strings.Contains(out, "from-cli") {
		t.Fatalf("action run --follow did not print the job's output:\n%s", out)
	}
	out, e, code = cli.Exec("job", "list", "--install", "acme", "-o", "json")
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
	if len(jobs) != 1 || jobs[0].State != "failed" || jobs[0].ExitCode != 3 {
		t.Fatalf("job list = %+v, want one failed job with exit code 3", jobs)
	}
	// An unknown token is refused with a message that says so.
	_, e, code = cli.Exec("--token", "byoc_op_not_a_token", "job", "list")
	if code != 1 || !strings.Contains(e, "unknown or revoked API token") {
		t.Fatalf("bad token: exit %d, stderr %q", code, e)
	}
}
