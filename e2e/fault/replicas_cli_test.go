package fault

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/internal/syncbuf"
)

// followCLI starts byoc args against a balancer of its own in front of
// w's replicas (so that the replica it talks to is known) and returns
// its output buffers, its exit channel and that balancer.
func (w *world) followCLI(args ...string) (stdout, stderr *syncbuf.Buffer, done chan error, lb *cluster.Balancer) {
	t := w.t
	t.Helper()
	var addrs []string
	for _, r := range w.replicas {
		addrs = append(addrs, r.Addr)
	}
	lb = cluster.StartBalancer(t, addrs...)
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), lb.URL(), w.ims.Token)
	cmd := cli.Cmd(args...)
	stdout, stderr = &syncbuf.Buffer{}, &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return stdout, stderr, done, lb
}

// killCLIReplica kills the replica the CLI's balancer sends it to.
func (w *world) killCLIReplica(lb *cluster.Balancer) {
	w.t.Helper()
	w.killReplica(w.cliReplica(lb), 0)
}

// cliReplica is the replica the CLI's balancer sends it to.
func (w *world) cliReplica(lb *cluster.Balancer) int {
	w.t.Helper()
	on := -1
	cluster.Eventually(w.t, 10*time.Second, "the CLI's connection", func() bool {
		for i, n := range lb.Active() {
			if n > 0 {
				on = i
				return true
			}
		}
		return false
	})
	return on
}

func exitCode(t *testing.T, done chan error, stdout, stderr *syncbuf.Buffer) int {
	t.Helper()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(90 * time.Second):
		t.Fatalf("byoc still runs after 90s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		return -1
	}
}

// byoc job logs --follow survives the death of the replica it follows
// through: it reconnects through the context's URL (the balancer, to a
// survivor) and resumes after the last line it printed, so every line
// is printed once, in order, and it exits with the job's exit code.
func TestReplicaKilledUnderJobLogsFollow(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 3, 1)
	const lines = 40
	w.enqueueScript("40 numbered lines", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; sleep 0.2; i=$((i+1)); done`, lines))
	stdout, stderr, done, lb := w.followCLI("job", "logs", w.jobs[0], "--follow")
	cluster.Eventually(t, 30*time.Second, "line 8 followed", func() bool { return strings.Contains(stdout.String(), "line 8\n") })
	w.killCLIReplica(lb)
	if code := exitCode(t, done, stdout, stderr); code != 0 {
		t.Fatalf("byoc job logs --follow exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if strings.HasPrefix(l, "line ") {
			got = append(got, l)
		}
	}
	var want []string
	for i := 1; i <= lines; i++ {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the follow printed %d lines, want lines 1..%d once each, in order:\n%s\nstderr:\n%s", len(got), lines, stdout.String(), stderr.String())
	}
	t.Logf("stderr of the follow:\n%s", stderr.String())
}

// byoc install provision --wait survives the replica it polls losing
// PostgreSQL for two seconds (its polls fail; it retries on the same
// connection) and then dying (it retries through the balancer, to a
// survivor), and reports the end.
func TestReplicaKilledUnderWorkflowWait(t *testing.T) {
	skipShort(t)
	t.Parallel()
	w := newReplicaWorld(t, 3, 0)
	cli := cluster.NewCLIWith(t, filepath.Join(t.TempDir(), "byoc.json"), w.lb.URL(), w.ims.Token)
	pushed := cli.PushApp(map[string]string{
		"app.toml":           "name = \"slow\"\n",
		"components/a.toml":  "type = \"action\"\n[config]\nsteps = [{ name = \"a\", script = \"sleep 8\" }]\n",
		"components/b.toml":  "type = \"action\"\ndependencies = [\"a\"]\n[config]\nsteps = [{ name = \"b\", script = \"sleep 1\" }]\n",
		"installs/acme.toml": "",
	})
	cluster.StartAgent(t, w.lb.URL(), pushed.EnrollToken(t), t.TempDir(), w.agentFlags()...)
	stdout, stderr, done, lb := w.followCLI("install", "provision", "acme", "--wait")
	cluster.Eventually(t, 30*time.Second, "step a running", func() bool { return strings.Contains(stdout.String(), "running   a") })
	on := w.cliReplica(lb)
	w.partition(on, 2*time.Second)
	w.killReplica(on, 0)
	if code := exitCode(t, done, stdout, stderr); code != 0 || !strings.Contains(stdout.String(), "succeeded: 2/2 done") {
		t.Fatalf("byoc install provision --wait exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("stderr of the wait:\n%s", stderr.String())
}
