package sandbox

import (
	"bufio"
	"context"
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

// holdStep is a plugin-like process (the test binary run as "hold-step"):
// it runs a sandboxed step in a cgroup, as the action plugin does, which
// prints "started" and sleeps until the process is killed.
func holdStep() {
	s := New(context.Background(), Options{DisableBubblewrap: true})
	_, err := s.Run(context.Background(), Policy{WorkDir: os.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, Limits: Limits{PIDs: 50}, Stdout: os.Stdout},
		[]string{"/bin/sh", "-c", "echo started; exec sleep 300"})
	fmt.Println("error", err)
	os.Exit(1)
}

// stepCgroups lists the step cgroups named after pid in every base.
func stepCgroups(t *testing.T, h hierarchy, pid int) []string {
	t.Helper()
	var out []string
	for _, base := range h.bases {
		m, err := filepath.Glob(filepath.Join(base, fmt.Sprintf("%s%d.*", stepPrefix, pid)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	slices.Sort(out)
	return out
}

// A plugin killed mid-step (with its agent) leaves its step's cgroups; a
// sweep removes them, kills what still ran in a leftover, and keeps the
// cgroups of a step still running and any cgroup not named after a
// process.
func TestSweepCgroups(t *testing.T) {
	if s := New(t.Context(), Options{DisableBubblewrap: true}); s.cg == nil {
		t.Skipf("no writable cgroups here: %q", s.Warnings())
	}
	h, why := findCgroups("")
	if why != "" {
		t.Fatal(why)
	}

	// A step of this process, running: its cgroups are in use.
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() {
		_, err := New(ctx, Options{DisableBubblewrap: true}).Run(ctx, Policy{WorkDir: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, Limits: Limits{PIDs: 50}},
			[]string{"sleep", "300"})
		ran <- err
	}()
	t.Cleanup(func() { cancel(); <-ran })
	var live []string
	deadline := time.Now().Add(10 * time.Second)
	for live = stepCgroups(t, h, os.Getpid()); len(live) == 0 && time.Now().Before(deadline); live = stepCgroups(t, h, os.Getpid()) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(live) == 0 {
		t.Fatal("the running step's cgroup never appeared")
	}

	// A plugin-like process killed with SIGKILL mid-step.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "hold-step")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed := stepCgroups(t, h, cmd.Process.Pid)
	if len(killed) == 0 {
		t.Fatal("the killed plugin left no step cgroup: nothing to sweep")
	}

	// A leftover whose process outlived its creator: a cgroup named after
	// a dead process, with a live sleep in it.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphanName := fmt.Sprintf("%s%d.1-test", stepPrefix, dead.Process.Pid)
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	var orphans []string
	for _, base := range h.bases {
		dir := filepath.Join(base, orphanName)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, dir)
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Not named after a process: not ours to judge.
	var foreign []string
	for _, base := range h.bases {
		dir := filepath.Join(base, stepPrefix+"0123456789ab")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		foreign = append(foreign, dir)
		t.Cleanup(func() { syscall.Rmdir(dir) })
	}

	removed, err := SweepCgroups("")
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string(nil), killed...), orphans...)
	slices.Sort(want)
	var ours []string
	for _, r := range removed {
		// Other tests' or agents' leftovers on this machine may go too;
		// judge only those this test made.
		if slices.Contains(want, r) || slices.Contains(live, r) || slices.Contains(foreign, r) {
			ours = append(ours, r)
		}
	}
	slices.Sort(ours)
	if !slices.Equal(ours, want) {
		t.Errorf("removed %v, want exactly %v", ours, want)
	}
	for _, keep := range append(live, foreign...) {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for !processGone(sleeper.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !processGone(sleeper.Process.Pid) {
		t.Error("the process left in a leftover cgroup still runs")
	}
	select {
	case err := <-ran:
		t.Fatalf("the running step ended during the sweep: %v", err)
	default:
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}
