package cluster

import (
	"os/exec"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/proctest"
)

// TestProcessesDieWithTheTest: a test binary killed outright (as a
// timeout's panic skips every cleanup) takes with it the processes it
// started as the cluster starts imsd and agentd (dieWithTest).
func TestProcessesDieWithTheTest(t *testing.T) {
	proctest.DiesWithTheBinary(t, 10*time.Second, func(t *testing.T) ([]int, []string) {
		cmd := exec.Command("sleep", "600")
		dieWithTest(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return []int{cmd.Process.Pid}, nil
	})
}
