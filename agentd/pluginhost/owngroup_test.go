package pluginhost_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/plugins/action"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

func init() { builtins["spawner"] = spawner{action.New()} }

// spawner is a plugin whose apply runs a program as the terraform type
// runs terraform: terraform-exec starts it in a process group of its own
// (Setpgid), and its providers are its children, in that group. The
// program here stands for one that does not stop on the interrupt the
// cancel sends (a hung terraform, or one killed outright, whose
// providers nobody stops); the apply returns on the cancel.
type spawner struct{ sdk.Plugin }

func (s spawner) Describe(ctx context.Context, req *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	r, err := s.Plugin.Describe(ctx, req)
	if r != nil {
		r.Type = "spawner"
	}
	return r, err
}

func (spawner) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	file := req.Env["PIDS"]
	cmd := exec.Command(self, "own-group", file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go cmd.Wait()
	for {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	req.Log.Stdout("started")
	<-ctx.Done()
	return nil, ctx.Err()
}

// ownGroup is the program spawner runs: it starts a child (a provider)
// in its group, writes both pids to file, ignores the interrupt and
// waits.
func ownGroup(file string) {
	signal.Ignore(os.Interrupt)
	child := exec.Command("sleep", "300")
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(file+".tmp", fmt.Appendf(nil, "%d %d", os.Getpid(), child.Process.Pid), 0o644); err != nil || os.Rename(file+".tmp", file) != nil {
		os.Exit(1)
	}
	child.Wait()
	os.Exit(0)
}

// TestCancelKillsGroupsItsPluginMade: a cancel ends the processes a
// plugin started in a process group of their own, as the terraform type
// runs terraform and terraform its providers: they left the plugin's
// group but not its session, and nothing is left running. Before, the
// cancel killed the plugin's group only, and such a process and its
// child lived on, orphaned.
func TestCancelKillsGroupsItsPluginMade(t *testing.T) {
	l := newLoader(t)
	l.Builtins = append(l.Builtins, "spawner")
	inst, dir := start(t, l, "spawner", nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pidFile := filepath.Join(t.TempDir(), "pids")
	var pids []int
	_, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{
		Job:    sdk.JobContext{WorkDir: dir},
		Config: script("true"),
		Env:    map[string]string{"PATH": "/usr/bin:/bin", "PIDS": pidFile},
	}, func(e sdk.LogEvent) {
		if e.Text != "started" {
			return
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Error(err)
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
		if len(pids) > 0 {
			if _, pg, ok := stat(pids[0]); !ok || pg == inst.PGID() || pg != pids[0] {
				t.Errorf("the program's group is %d (found %v), want its own, not the plugin's %d", pg, ok, inst.PGID())
			}
		}
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled", err)
	}
	if len(pids) != 2 {
		t.Fatalf("pids %v, want the program in its own group and its child", pids)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// Run kills before it returns; a moment for the kernel to reap.
	assertGone(t, pids, 2*time.Second)
}
