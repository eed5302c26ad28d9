package cluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const dieHelperEnv = "BYOC_CLUSTER_DIE_HELPER"

// TestDieWithTestHelper is the killed test binary of
// TestProcessesDieWithTheTest: it starts a process the way the cluster
// starts imsd and agentd, prints its pid, and waits to be killed.
func TestDieWithTestHelper(t *testing.T) {
	if os.Getenv(dieHelperEnv) == "" {
		t.Skip("run by TestProcessesDieWithTheTest")
	}
	cmd := exec.Command("sleep", "600")
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Println(cmd.Process.Pid)
	select {}
}

// TestProcessesDieWithTheTest: a test binary killed outright (as a
// timeout's panic skips every cleanup) takes the processes it started
// with it.
func TestProcessesDieWithTheTest(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe, "-test.run", "^TestDieWithTestHelper$", "-test.count", "1")
	helper.Env = append(os.Environ(), dieHelperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		helper.Process.Kill()
		t.Fatalf("the helper printed no pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the helper printed %q", line)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	helper.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d outlived the test binary that started it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie, dead but not reaped by a
// PID 1 that does not reap, does not).
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
