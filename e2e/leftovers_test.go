package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// leftovers are the things a running job of one agent keeps on the
// machine: its attempt's workspace, its plugin's socket dir and its
// step's cgroups (none where cgroups are not writable).
type leftovers struct {
	workspace string
	socket    []string
	cgroups   []string
}

func (l leftovers) all() []string {
	return append(append([]string{l.workspace}, l.socket...), l.cgroups...)
}

var pluginGroup = regexp.MustCompile(`pid group (\d+)`)

// runningJob enqueues a long job on install and waits until it runs, and
// returns what it keeps on the machine.
func runningJob(t *testing.T, ims *cluster.IMS, agent *cluster.AgentProc, install, tmp string) (string, leftovers) {
	t.Helper()
	job := enqueue(t, ims.Admin(), install, "echo started; sleep 300", 600)
	var pgid int
	cluster.Eventually(t, 30*time.Second, "job on "+install+" to start", func() bool {
		for _, l := range cluster.Logs(t, ims.Admin(), job.Id) {
			if m := pluginGroup.FindStringSubmatch(l.Text); m != nil && l.Stream == imsv1.LogStream_LOG_STREAM_SYSTEM {
				pgid, _ = strconv.Atoi(m[1])
			}
			if l.Text == "started" && pgid > 0 {
				return true
			}
		}
		return false
	})
	l := leftovers{workspace: filepath.Join(agent.StateDir, "jobs", job.Id+"-1")}
	var err error
	if l.socket, err = filepath.Glob(filepath.Join(tmp, fmt.Sprintf("byoc-plugin-%d.*", agent.Cmd.Process.Pid))); err != nil {
		t.Fatal(err)
	}
	l.cgroups = stepCgroups(t, pgid)
	for _, p := range l.all() {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("running job %s: %v", job.Id, err)
		}
	}
	if len(l.socket) != 1 {
		t.Fatalf("agent %d has socket dirs %v, want one", agent.Cmd.Process.Pid, l.socket)
	}
	return job.Id, l
}

// stepCgroups lists the step cgroups plugin pid made, in the cgroups of
// this process (which the agents and their plugins inherit).
func stepCgroups(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", parts[2])
		if parts[1] != "" {
			dir = filepath.Join("/sys/fs/cgroup", strings.Split(parts[1], ",")[0], parts[2])
		}
		m, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("byoc-step-%d.*", pid)))
		out = append(out, m...)
	}
	return out
}

// An agent killed with SIGKILL mid-job leaves the attempt's workspace,
// its plugin's socket dir and its step's cgroups; started again on its
// state dir, it removes them, and leaves those of another agent's running
// job alone.
func TestLeftoversOfAKilledAgentAreSwept(t *testing.T) {
	skipShort(t)
	// Built first: the binaries go to the temp dir, which must outlive
	// this test.
	cluster.Binaries(t)
	// The agents' temp dir, where socket dirs go. Not t.TempDir(): its
	// path (the test's name and a random number) plus the socket dir's
	// name and go-plugin's socket file can pass the 108-byte limit of a
	// unix socket path, and bind fails with "invalid argument".
	tmp, err := os.MkdirTemp("", "lo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	ims := cluster.StartIMS(t, fast)
	a := startAgent(t, ims, "acme")
	b := startAgent(t, ims, "globex")
	_, killed := runningJob(t, ims, a, "acme", tmp)
	otherJob, kept := runningJob(t, ims, b, "globex", tmp)
	if len(killed.cgroups) == 0 {
		t.Logf("no step cgroups here (cgroups not writable): checking workspaces and socket dirs only")
	}

	a.Kill()
	// Its plugin dies with it (parent-death signal); the leftovers stay.
	cluster.Eventually(t, 10*time.Second, "the killed agent's plugin to die", func() bool {
		return len(killed.cgroups) == 0 || cgroupEmpty(killed.cgroups[0])
	})
	for _, p := range killed.all() {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the killed agent left no %s to sweep: %v", p, err)
		}
	}

	again := cluster.StartAgent(t, ims.URL(), "", a.StateDir)
	cluster.Eventually(t, 30*time.Second, "the restarted agent to remove the leftovers", func() bool {
		for _, p := range killed.all() {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				return false
			}
		}
		return true
	})
	// The agent logs what it removed once the sweep is done, which may be
	// a moment after the last leftover is gone (a job cgroup's removal).
	cluster.Eventually(t, 10*time.Second, "the restarted agent to say what it removed", func() bool {
		return strings.Contains(again.Output(), "removed leftovers of a previous run")
	})
	for _, p := range kept.all() {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the other agent's running job lost %s: %v", p, err)
		}
	}
	r, err := ims.Admin().GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: otherJob}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Msg.Job.State != imsv1.JobState_JOB_STATE_RUNNING {
		t.Errorf("the other agent's job is %s, want still running", r.Msg.Job.State)
	}
	if syscall.Kill(b.Cmd.Process.Pid, 0) != nil {
		t.Error("the other agent died")
	}
}

// cgroupEmpty reports whether no process is left in cgroup dir.
func cgroupEmpty(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && strings.TrimSpace(string(b)) == ""
}
