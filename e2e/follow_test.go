package e2e

import (
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// slowApp has one action component that never finishes in a test's time,
// and an install of it from a file.
var slowApp = map[string]string{
	"app.toml":           "name = \"slow\"\n",
	"components/a.toml":  "type = \"action\"\n[config]\nsteps = [{ name = \"a\", script = \"sleep 600\" }]\n",
	"installs/acme.toml": "",
}

// interrupt starts byoc args, waits until its stdout shows ready, sends
// sig and returns its exit code and stderr, failing the test unless it
// exits within two seconds of the signal.
func interrupt(t *testing.T, cli *cluster.CLI, sig os.Signal, ready string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := cli.Cmd(args...)
	var o, e syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	cluster.Eventually(t, 20*time.Second, "byoc "+strings.Join(args, " ")+" to print "+ready, func() bool {
		return strings.Contains(o.String(), ready)
	})
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("byoc %s still runs 2s after %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), sig, o.String(), e.String())
	}
	return code, o.String(), e.String()
}

// Ctrl-C (SIGINT) and SIGTERM stop a follow at once: byoc job logs
// --follow, byoc action run --follow and --wait on a workflow each say
// where they stopped and exit 130, and what they followed goes on.
func TestFollowStopsAtOnceOnInterrupt(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "alpha")
	cluster.StartAgent(t, ims.URL(), tok, t.TempDir())
	job := enqueue(t, c, "alpha", "echo first-line; sleep 600", 900)

	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		code, _, stderr := interrupt(t, cli, sig, "first-line", "job", "logs", job.Id, "--follow")
		if code != 130 || !regexp.MustCompile(`Stopped following job `+job.Id+` after log line \d+ of attempt 1;`).MatchString(stderr) {
			t.Fatalf("job logs --follow after %v: exit %d, want 130 and where it stopped\n%s", sig, code, stderr)
		}
	}
	code, _, stderr := interrupt(t, cli, os.Interrupt, "first-line", "action", "run", "alpha", "--follow", "--", "echo first-line; sleep 600")
	if code != 130 || !strings.Contains(stderr, "Stopped following job job_") {
		t.Fatalf("action run --follow: exit %d, want 130\n%s", code, stderr)
	}
	if j := cluster.WaitJob(t, c, job.Id, time.Second, imsv1.JobState_JOB_STATE_RUNNING); j.EndTime != nil {
		t.Fatalf("the job ended when its follower stopped: %v", j.State)
	}

	// A workflow whose step waits for an agent that never comes.
	cli.PushApp(slowApp)
	// The step's job waits in the queue: said so, not "running".
	code, out, stderr := interrupt(t, cli, os.Interrupt, "queued    a (job ", "install", "provision", "acme", "--wait")
	if code != 130 || !strings.Contains(stderr, "Stopped following workflow wf_") || !strings.Contains(stderr, "(running: ") ||
		!strings.Contains(out, "install acme has no agent enrolled yet") || strings.Contains(out, "running   a") {
		t.Fatalf("install provision --wait: exit %d, want 130\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

// --wait on a workflow that stops to await approval exits 3, not 0: a
// script must not carry on as if it had finished.
func TestWaitAwaitingApprovalExitsThree(t *testing.T) {
	opts := fast
	opts.WorkflowInterval = 100 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	app := map[string]string{}
	for k, v := range slowApp {
		app[k] = v
	}
	app["installs/acme.toml"] = "require_approval = true\n"
	cli.PushApp(app)
	out := cli.Run(3, "install", "provision", "acme", "--wait")
	if !strings.Contains(out, "awaits approval of its plan") {
		t.Fatalf("provision --wait:\n%s", out)
	}
	id := out[strings.Index(out, "wf_"):]
	id = id[:strings.IndexAny(id, " .\n")]
	if out := cli.Run(3, "workflow", "get", id, "--wait", "-o", "json"); !strings.Contains(out, `"state": "awaiting_approval"`) {
		t.Fatalf("workflow get --wait -o json:\n%s", out)
	}
}

// byoc job logs shows a job's control sequences on a terminal instead of
// sending them (a job must not recolour, retitle or clear the operator's
// terminal), as the console does, and writes the bytes exactly when piped.
func TestJobLogsCleanOnTerminalExactWhenPiped(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "alpha")
	cluster.StartAgent(t, ims.URL(), tok, t.TempDir())
	job := enqueue(t, c, "alpha", `printf 'A \033[31mRED\033[0m \033]0;pwned\007 tab\there Z\n'`, 60)
	cluster.WaitJob(t, c, job.Id, 20*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED)

	raw := "A \x1b[31mRED\x1b[0m \x1b]0;pwned\x07 tab\there Z\n"
	if out, _, code := cli.Exec("job", "logs", job.Id); code != 0 || !strings.Contains(out, raw) {
		t.Fatalf("piped: exit %d, want the bytes exactly (%q):\n%q", code, raw, out)
	}
	term := cluster.StartTerminal(t, 100, 10, []string{"BYOC_CONFIG=" + cli.Config}, filepath.Join(cluster.Binaries(t), "byoc"), "job", "logs", job.Id)
	s := term.WaitText(" Z")
	if !strings.Contains(s, "A \ufffd[31mRED\ufffd[0m \ufffd]0;pwned\ufffd tab") {
		t.Fatalf("terminal: the control sequences are not shown as text:\n%s", s)
	}
	if ansi := term.ScreenANSI(); strings.Contains(ansi, "31m") && !strings.Contains(ansi, "[31mRED") {
		t.Fatalf("terminal: the job's colour reached the terminal:\n%q", ansi)
	}
}
