//go:build linux

// Package proctest helps tests about processes outliving what started
// them: whether a pid still runs, a process's parent, and the test
// binary re-run as a helper that a test can kill outright (as a test
// binary's timeout does: it panics without running its cleanups).
package proctest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stat returns the fields of /proc/PID/stat after the command's name.
func stat(pid int) []string {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(st)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// Alive reports whether pid runs (a zombie, dead but not reaped by a
// PID 1 that does not reap, does not).
func Alive(pid int) bool {
	f := stat(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// PPID returns pid's parent, or fails t.
func PPID(t testing.TB, pid int) int {
	t.Helper()
	f := stat(pid)
	if len(f) < 2 {
		t.Fatalf("no process %d", pid)
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// Helper re-runs the test binary with only test name and env set to 1,
// and returns it running and the first line it printed (its helper
// mode prints a pid, say, then blocks until killed). The helper is
// killed at t's end if it still runs.
func Helper(t testing.TB, name, env string) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^"+name+"$", "-test.count", "1")
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the helper %s printed nothing: %v", name, err)
	}
	return cmd, strings.TrimSpace(line)
}

// helperEnv marks the helper run of DiesWithTheBinary.
const helperEnv = "BYOC_PROCTEST_DIES_HELPER"

// helperReport is what DiesWithTheBinary's helper prints, on one line.
type helperReport struct {
	Pids      []int    `json:"pids"`
	Leftovers []string `json:"leftovers"`
}

// DiesWithTheBinary checks that the processes start starts die with the
// test binary that started them when it is killed outright. It re-runs
// the test binary for t's test alone (t must be a top-level test); there
// it runs start, prints the pids start returns, and blocks until killed.
// Here it kills that helper, fails t unless every pid has stopped within
// timeout, and removes the leftovers start returned (the helper's files,
// which its cleanups, never run, would have removed).
func DiesWithTheBinary(t *testing.T, timeout time.Duration, start func(t *testing.T) (pids []int, leftovers []string)) {
	t.Helper()
	if os.Getenv(helperEnv) != "" {
		var r helperReport
		r.Pids, r.Leftovers = start(t)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(string(b))
		select {}
	}
	helper, line := Helper(t, t.Name(), helperEnv)
	var r helperReport
	if err := json.Unmarshal([]byte(line), &r); err != nil || len(r.Pids) == 0 {
		t.Fatalf("the helper printed %q", line)
	}
	t.Cleanup(func() {
		for _, p := range r.Leftovers {
			os.RemoveAll(p)
		}
	})
	KillAndWaitGone(t, helper, timeout, r.Pids...)
}

// KillAndWaitGone kills helper outright (SIGKILL) and fails t unless
// every one of pids has stopped running within timeout; any left are
// killed.
func KillAndWaitGone(t testing.TB, helper *exec.Cmd, timeout time.Duration, pids ...int) {
	t.Helper()
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for Alive(pid) {
			if time.Now().After(deadline) {
				for _, p := range pids {
					syscall.Kill(p, syscall.SIGKILL)
				}
				t.Fatalf("process %d outlived the test binary that started it (by %s)", pid, timeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// NothingLeft makes the test binary a child subreaper for t's test, so
// that a process the test starts which outlives its parent (a Terraform
// provider whose terraform was killed) is re-parented to the test binary
// rather than to init, and fails t at its end if any process descending
// from the test binary that was not there when NothingLeft was called
// still runs; it kills those. Tests that call it must not run in
// parallel with others that start processes.
func NothingLeft(t *testing.T) {
	t.Helper()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	before := map[int]bool{}
	for _, pid := range Descendants(os.Getpid()) {
		before[pid] = true
	}
	t.Cleanup(func() {
		var left []string
		for _, pid := range Descendants(os.Getpid()) {
			if before[pid] {
				continue
			}
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			left = append(left, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
			syscall.Kill(pid, syscall.SIGKILL)
		}
		syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
		if len(left) > 0 {
			t.Errorf("processes the test started outlived it: %s", strings.Join(left, ", "))
		}
	})
}

// Descendants lists the live processes (not zombies) whose chain of
// parents reaches root.
func Descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !Alive(pid) {
			continue
		}
		if f := stat(pid); len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
			if _, ok := parent[p]; !ok {
				break
			}
		}
	}
	return out
}
