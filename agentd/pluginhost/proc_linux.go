package pluginhost

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"github.com/byoc-dev/byoc/internal/procowner"
)

// pluginProcAttr puts a plugin in its own process group, so that one
// signal reaches it and everything it started, and kills it if the agent
// dies.
// a holds what the sandbox set (namespaces, ID maps), or is nil.
func pluginProcAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setpgid, a.Pdeathsig = true, syscall.SIGKILL
	return a
}

// signalGroup sends sig to every process in the group pgid.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// groupAlive reports whether any process of group pgid still runs.
// Zombies do not count: they are dead, only waiting for a parent to reap
// them, which for orphans may be an init that never does.
func groupAlive(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	return len(groupMembers(pgid)) > 0
}

// groupMembers lists the live (not zombie) processes of group pgid.
func groupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, pg, ok := procStat(pid)
		if ok && pg == pgid && state != 'Z' && state != 'X' {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processExited reports whether pid is gone or a zombie.
func processExited(pid int) bool {
	state, _, ok := procStat(pid)
	return !ok || state == 'Z' || state == 'X'
}

// procStat reads the state and process group of pid from /proc.
func procStat(pid int) (state byte, pgid int, ok bool) {
	st, ok := procowner.ReadStat(pid)
	return st.State, st.PGID, ok
}
