package pluginhost

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"github.com/byoc-dev/byoc/internal/procowner"
)

// pluginProcAttr starts a plugin in a session of its own, which makes it
// the leader of a process group of its own too (pgid = sid = its pid),
// so that one signal reaches it and everything it started, and kills it
// if the agent dies. A process the plugin starts in a group of its own
// (terraform-exec runs terraform so, with its providers) stays in the
// session: signalGroup reaches it there.
// a holds what the sandbox set (namespaces, ID maps), or is nil.
func pluginProcAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setsid, a.Setpgid, a.Pdeathsig = true, false, syscall.SIGKILL
	return a
}

// signalGroup sends sig to every process of the plugin whose session
// (and first process group) is sid: to each process group of the
// session, the plugin's own first. A process that made a session of its
// own (setsid) left on purpose, as a daemon does; a plugin's sandbox (a
// PID namespace) ends those.
func signalGroup(sid int, sig syscall.Signal) error {
	err := syscall.Kill(-sid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	for _, pg := range sessionGroups(sid) {
		if pg == sid {
			continue
		}
		if e := syscall.Kill(-pg, sig); e != nil && !errors.Is(e, syscall.ESRCH) && err == nil {
			err = e
		}
	}
	return err
}

// groupAlive reports whether any process of the plugin's session sid
// still runs. Zombies do not count: they are dead, only waiting for a
// parent to reap them, which for orphans may be an init that never does.
func groupAlive(sid int) bool {
	return len(sessionMembers(sid)) > 0
}

// sessionGroups lists the process groups of the live processes of
// session sid.
func sessionGroups(sid int) []int {
	var groups []int
	seen := map[int]bool{}
	for _, st := range sessionMembers(sid) {
		if !seen[st.PGID] {
			seen[st.PGID] = true
			groups = append(groups, st.PGID)
		}
	}
	return groups
}

// sessionMembers reads the live (not zombie) processes of session sid.
func sessionMembers(sid int) []procowner.Stat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procowner.Stat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procowner.ReadStat(pid)
		if ok && st.SID == sid && st.State != 'Z' && st.State != 'X' {
			out = append(out, st)
		}
	}
	return out
}

// processExited reports whether pid is gone or a zombie.
func processExited(pid int) bool {
	st, ok := procowner.ReadStat(pid)
	return !ok || st.State == 'Z' || st.State == 'X'
}
