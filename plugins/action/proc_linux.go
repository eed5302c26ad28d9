package action

import "syscall"

// stepProcAttr kills a script if the plugin dies. It deliberately does not
// set Setpgid: scripts stay in the plugin's process group, which the host
// kills as a whole.
func stepProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
