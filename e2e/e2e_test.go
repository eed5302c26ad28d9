// Package e2e runs byoc end to end: imsd in-process on a loopback port with
// a temporary data directory, agentd as real processes built from this
// repository, real plugin subprocesses and real shell scripts.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// fast lease timing so that expiry tests take seconds, not minutes.
// TestMain removes the binaries cluster.Binaries built when the tests
// end, and fails a passing run that leaves goroutines behind.
func TestMain(m *testing.M) { cluster.Main(m) }

var fast = cluster.Options{LeaseDuration: 1500 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond, SweepInterval: 50 * time.Millisecond}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping end-to-end test with real processes")
	}
}

func actionConfig(t testing.TB, script string) *structpb.Struct {
	t.Helper()
	cfg, err := structpb.NewStruct(map[string]any{"steps": []any{map[string]any{"name": "run", "script": script}}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func enqueue(t testing.TB, c imsv1connect.OperatorServiceClient, install, script string, timeout int64) *imsv1.Job {
	t.Helper()
	r, err := c.EnqueueJob(context.Background(), connect.NewRequest(&imsv1.EnqueueJobRequest{
		Install: install, ComponentType: "action", Operation: "apply", Config: actionConfig(t, script), TimeoutSeconds: timeout,
	}))
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return r.Msg.Job
}

// follow streams a job's log until it ends and returns the lines and the
// ended job.
func follow(t testing.TB, c imsv1connect.OperatorServiceClient, id string) ([]*imsv1.LogLine, *imsv1.Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.StreamJobLogs(ctx, connect.NewRequest(&imsv1.StreamJobLogsRequest{JobId: id, Follow: true}))
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	var lines []*imsv1.LogLine
	var job *imsv1.Job
	for st.Receive() {
		lines = append(lines, st.Msg().Lines...)
		if st.Msg().Job != nil {
			job = st.Msg().Job
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("follow: %v", err)
	}
	if job == nil {
		t.Fatal("follow ended without the final job message")
	}
	return lines, job
}

func startAgent(t *testing.T, ims *cluster.IMS, installName string) *cluster.AgentProc {
	t.Helper()
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", installName)
	p := cluster.StartAgent(t, ims.URL(), token, filepath.Join(t.TempDir(), "agent"))
	waitConnected(t, ims, installName)
	return p
}

func waitConnected(t *testing.T, ims *cluster.IMS, install string) {
	t.Helper()
	cluster.Eventually(t, 30*time.Second, "agent of "+install+" to connect", func() bool {
		r, err := ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: install}))
		return err == nil && r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected
	})
}

func TestRunJobLogsAndResultInOrder(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	startAgent(t, ims, "acme")
	c := ims.Admin()

	job := enqueue(t, c, "acme", `echo one; echo two >&2; echo three; echo "region=eu-west-1" >> "$BYOC_OUTPUTS"; exit 0`, 60)
	lines, end := follow(t, c, job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.ExitCode != 0 {
		t.Fatalf("job ended %v exit %d (%s), want succeeded exit 0", end.State, end.ExitCode, end.Error)
	}
	// stdout and stderr are separate pipes: order holds within each.
	var stdout, stderr []string
	for _, l := range lines {
		switch l.Stream {
		case imsv1.LogStream_LOG_STREAM_STDOUT:
			stdout = append(stdout, l.Text)
		case imsv1.LogStream_LOG_STREAM_STDERR:
			stderr = append(stderr, l.Text)
		}
	}
	if !slices.Equal(stdout, []string{"one", "three"}) || !slices.Equal(stderr, []string{"two"}) {
		t.Fatalf("stdout %q, stderr %q; want [one three] and [two]", stdout, stderr)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i].Seq <= lines[i-1].Seq {
			t.Fatalf("log out of order at %d: seq %d after %d", i, lines[i].Seq, lines[i-1].Seq)
		}
	}
	if end.Outputs["region"] != "eu-west-1" {
		t.Fatalf("outputs = %v, want region=eu-west-1", end.Outputs)
	}

	failing := enqueue(t, c, "acme", `echo before; exit 7`, 60)
	_, end = follow(t, c, failing.Id)
	if end.State != imsv1.JobState_JOB_STATE_FAILED || end.ExitCode != 7 {
		t.Fatalf("failing job ended %v exit %d, want failed exit 7", end.State, end.ExitCode)
	}
	if end.Attempt != 1 {
		t.Fatalf("attempt = %d, want 1", end.Attempt)
	}
}

func TestPluginEnvironmentIsClean(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	startAgent(t, ims, "acme")
	c := ims.Admin()
	job := enqueue(t, c, "acme", `env`, 60)
	lines, end := follow(t, c, job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %v: %s", end.State, end.Error)
	}
	all := strings.Join(cluster.Texts(lines), "\n")
	if strings.Contains(all, "AWS_SECRET_ACCESS_KEY") || strings.Contains(all, "agent-secret-must-not-leak") {
		t.Fatalf("the agent's environment leaked into the job:\n%s", all)
	}
	if !strings.Contains(all, "BYOC_JOB_ID="+job.Id) {
		t.Fatalf("job environment lacks BYOC_JOB_ID:\n%s", all)
	}
}

// markerPIDs lists the live host processes whose command line contains
// marker. Steps run in their own PID namespace, so the pids a script could
// print are not the host's; a marker in the script's text finds them.
func markerPIDs(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), marker) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// marker returns a string unique to this test process and call, usable as
// a sleep duration: "300.<digits>".
func marker() string {
	markerSeq++
	return fmt.Sprintf("300.%d%03d", os.Getpid(), markerSeq)
}

var markerSeq int

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitPIDs waits until n host processes carry marker.
func waitPIDs(t *testing.T, marker string, n int) []int {
	t.Helper()
	var got []int
	cluster.Eventually(t, 30*time.Second, fmt.Sprintf("%d processes of the job to run", n), func() bool {
		got = markerPIDs(marker)
		return len(got) >= n
	})
	return got
}

// sleeper is a script that leaves processes behind, one of them ignoring
// SIGTERM. Its shell, its subshell and both sleeps carry mark.
func sleeper(mark string) string {
	return `sleep ` + mark + ` & (trap '' TERM; sleep ` + mark + `) & wait`
}

func TestCancelKillsEveryProcess(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	startAgent(t, ims, "acme")
	c := ims.Admin()
	mark := marker()
	job := enqueue(t, c, "acme", sleeper(mark), 300)
	ps := waitPIDs(t, mark, 4)
	if _, err := c.CancelJob(context.Background(), connect.NewRequest(&imsv1.CancelJobRequest{Id: job.Id, Reason: "operator changed their mind"})); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	end := cluster.WaitJob(t, c, job.Id, 20*time.Second, imsv1.JobState_JOB_STATE_CANCELLED)
	if !strings.Contains(end.Error, "operator changed their mind") {
		t.Fatalf("cancelled job error = %q, want the reason", end.Error)
	}
	// The kill grace is 2s; the result is written after the group is gone.
	cluster.Eventually(t, 5*time.Second, "every process of the job to exit", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
	// The agent keeps serving.
	next := enqueue(t, c, "acme", `echo still here`, 60)
	if _, end := follow(t, c, next.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("next job ended %v: %s", end.State, end.Error)
	}
}

func TestTimeoutKillsEveryProcess(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	startAgent(t, ims, "acme")
	c := ims.Admin()
	mark := marker()
	job := enqueue(t, c, "acme", sleeper(mark), 2)
	ps := waitPIDs(t, mark, 4)
	end := cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_TIMED_OUT)
	if !strings.Contains(end.Error, "timed out after 2s") {
		t.Fatalf("timed-out job error = %q", end.Error)
	}
	cluster.Eventually(t, 5*time.Second, "every process of the job to exit", func() bool {
		for _, p := range ps {
			if alive(p) {
				return false
			}
		}
		return true
	})
}

// pluginAncestor finds the plugin process ("agentd plugin action") that
// pid descends from.
func pluginAncestor(t *testing.T, pid int) int {
	t.Helper()
	for p := pid; p > 1; {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); err == nil && strings.Contains(string(b), "plugin\x00action") {
			return p
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			break
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
		if p, err = strconv.Atoi(f[1]); err != nil {
			break
		}
	}
	t.Fatalf("no plugin process above pid %d", pid)
	return 0
}

func TestCrashingPluginFailsJobAndAgentGoesOn(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	startAgent(t, ims, "acme")
	c := ims.Admin()
	// Kill the plugin process mid-apply. A step cannot do it itself: it
	// runs in its own PID namespace and sees no process of the host.
	mark := marker()
	crash := enqueue(t, c, "acme", `echo about to crash; sleep `+mark, 60)
	ps := waitPIDs(t, mark, 1)
	plugin := pluginAncestor(t, ps[0])
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, end := follow(t, c, crash.Id)
	if end.State != imsv1.JobState_JOB_STATE_FAILED || !strings.Contains(end.Error, "plugin") {
		t.Fatalf("crashed job ended %v with error %q; want failed naming the plugin", end.State, end.Error)
	}
	next := enqueue(t, c, "acme", `echo fine`, 60)
	if _, end := follow(t, c, next.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("next job ended %v: %s", end.State, end.Error)
	}
}
