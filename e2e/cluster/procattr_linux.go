package cluster

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes cmd's process get SIGKILL when the test binary dies
// (Pdeathsig): a test binary that times out panics without running its
// cleanups, and an imsd or agentd left behind would hold its ports and
// a core through the next package's tests.
func dieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
