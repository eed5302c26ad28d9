package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/proctest"
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
	helper, line := proctest.Helper(t, "TestDieWithTestHelper", dieHelperEnv)
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("the helper printed %q", line)
	}
	proctest.KillAndWaitGone(t, helper, 10*time.Second, pid)
}
