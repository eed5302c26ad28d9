package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A delegated cgroup has the step controllers' directories (v2: with its
// plugin leaf and the controllers enabled for its children) and Remove
// takes it away with what was made below it; a sweep removes those a dead
// agent left, with their step cgroups, killing what still ran there, and
// keeps a live agent's.
func TestDelegateAndSweepCgroups(t *testing.T) {
	if s := New(t.Context(), Options{DisableBubblewrap: true}); s.cg == nil {
		t.Skipf("no writable cgroups here: %q", s.Warnings())
	}
	h, why := findCgroups("")
	if why != "" {
		t.Fatal(why)
	}
	live, err := DelegateCgroup("", "job-1-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Remove() })
	for _, d := range live.Dirs() {
		if !strings.Contains(filepath.Base(d), "-job-1-1-") {
			t.Errorf("delegated cgroup %s is not named after its job", d)
		}
		if _, err := os.Stat(d); err != nil {
			t.Fatal(err)
		}
	}
	if live.Version == "v2" {
		b, err := os.ReadFile(filepath.Join(live.Dirs()[0], "cgroup.subtree_control"))
		if err != nil || !strings.Contains(string(b), "memory") || !strings.Contains(string(b), "pids") {
			t.Errorf("controllers for the steps: %q, %v", b, err)
		}
	}

	// A dead agent's job cgroup, with a step cgroup a live sleep is in.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	name := fmt.Sprintf("%s%d.1-job-2-1-test", jobPrefix, dead.Process.Pid)
	var left []string
	for _, base := range h.bases {
		dir := filepath.Join(base, name)
		step := filepath.Join(dir, stepPrefix+"1.1-test")
		if err := os.MkdirAll(step, 0o755); err != nil {
			t.Fatal(err)
		}
		left = append(left, dir)
		if err := os.WriteFile(filepath.Join(step, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := SweepCgroups("")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range left {
		if !slices.Contains(removed, d) {
			t.Errorf("the sweep did not remove %s (removed %v)", d, removed)
		}
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is still there", d)
		}
	}
	for _, d := range live.Dirs() {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the sweep removed a live agent's %s", d)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(sleeper.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !processGone(sleeper.Process.Pid) {
		t.Error("the process left in a leftover step cgroup still runs")
	}

	if err := live.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range live.Dirs() {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("Remove left %s", d)
		}
	}
}

// Without cgroups to delegate, DelegateCgroup says why; a plugin the
// agent could not delegate one to says so in its steps' warning.
func TestNoDelegation(t *testing.T) {
	if _, err := DelegateCgroup(t.TempDir(), "j"); err == nil || !strings.Contains(err.Error(), "cgroup v1 controller memory is not mounted") {
		t.Errorf("DelegateCgroup on a directory without cgroups: %v", err)
	}
	t.Setenv(CgroupEnv, "not delegated: cgroup v2 controller memory is not enabled in /x/cgroup.subtree_control")
	if _, why := findCgroups(""); !strings.Contains(why, "the agent gave this plugin no cgroup for its steps (not delegated: cgroup v2 controller memory") {
		t.Errorf("why = %q", why)
	}
}

// The mechanics of a v2 delegation, in both sandboxes: the process starts
// in the leaf, sees the job cgroup writable at /sys/fs/cgroup, and moves
// a child of its own into a sub-cgroup there. Controllers are left out:
// a machine whose cpu, memory and pids are on cgroup v1 still has a v2
// hierarchy (at /sys/fs/cgroup/unified) to check the rest on.
func TestDelegateV2Mechanics(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("cgroups are writable for root here only")
	}
	root := ""
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(r, "cgroup.controllers")); err == nil {
			root = r
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	saved := delegatedControllers
	delegatedControllers = nil
	t.Cleanup(func() { delegatedControllers = saved })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	script := `cat /proc/self/cgroup; mkdir /sys/fs/cgroup/step && sh -c 'echo $$ > /sys/fs/cgroup/step/cgroup.procs && echo moved && cat /proc/self/cgroup'`
	argv := []string{"/bin/sh", "-c", script}
	for _, mode := range []string{"bubblewrap", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			d, err := DelegateCgroup(root, "v2test")
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := d.Remove(); err != nil {
					t.Error(err)
				}
			}()
			if d.Version != "v2" {
				t.Fatalf("version %s", d.Version)
			}
			m := Mounts{Writable: []string{work}, Chdir: work, UnshareUser: true}
			d.Apply(&m)
			var cmd *exec.Cmd
			if mode == "bubblewrap" {
				bwrap, err := exec.LookPath("bwrap")
				if err != nil {
					t.Skip("bubblewrap not installed")
				}
				args := m.BwrapArgs()
				if slices.Contains(args, "--unshare-cgroup-try") {
					t.Errorf("a v2 delegation keeps the host's cgroup namespace: %v", args)
				}
				cmd = exec.Command(bwrap, append(append(args, "--"), argv...)...)
			} else if cmd, err = NamespaceCommand(self, m, argv, 0); err != nil {
				t.Fatal(err)
			}
			leaf, err := d.LeafFD()
			if err != nil {
				t.Fatal(err)
			}
			defer leaf.Close()
			if cmd.SysProcAttr == nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{}
			}
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(leaf.Fd())
			cmd.Env = []string{}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			job := filepath.Base(d.Dirs()[0])
			for _, want := range []string{"0::/", job + "/plugin\n", "moved\n", job + "/step\n"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
