package pluginhost

import (
	"errors"
	"fmt"
	"os/exec"

	"github.com/byoc-dev/byoc/plugins/action/sandbox"
)

// ShellOptions say what a support shell (agentd/agent's sessions) sees
// in its sandbox.
type ShellOptions struct {
	// Work is the session's own directory (writable, the working
	// directory and HOME).
	Work string
	// Writable and ReadOnly are more host paths it sees (its component's
	// state directory, the customer's --sandbox-writable and
	// --sandbox-read-only paths); Hidden are the agent's own paths kept
	// from it even inside a directory it sees.
	Writable, ReadOnly, Hidden []string
	// TTY is the host path of the session's terminal (/dev/pts/N): under
	// bubblewrap the sandbox's /dev/pts holds it alone, at the same path,
	// so that tty(1) names it (and no other terminal of the host).
	TTY string
}

// ShellCommand returns the command that runs argv in the same sandbox
// the loader runs plugins in: the system directories read-only, the
// session's own directory and opt's paths, its own user, PID, IPC and
// UTS namespaces, no capabilities. Its network is the host's only when
// the agent runs plugins with the host's network (--plugin-network
// host); otherwise it has a network namespace with nothing in it (the
// egress proxy serves plugins only). The caller sets the command's
// environment (nothing of the agent's own) and starts it on a PTY.
func (l *Loader) ShellCommand(argv []string, opt ShellOptions) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("shell: no command")
	}
	if opt.Work == "" {
		return nil, errors.New("shell: no work directory")
	}
	m := pluginMounts(opt.Work, "", StartOptions{ReadOnly: opt.ReadOnly, Writable: opt.Writable, Hidden: opt.Hidden})
	m.Hostname = "byoc-session"
	m.Network = l.network() == NetworkHost
	s := l.Sandbox
	if s == nil {
		s = &Sandbox{Isolation: IsolationNone}
	}
	switch s.Isolation {
	case IsolationBubblewrap:
		args := m.BwrapArgs()
		if opt.TTY != "" {
			args = append(args, "--tmpfs", "/dev/pts", "--dev-bind", opt.TTY, opt.TTY, "--remount-ro", "/dev/pts")
		}
		return exec.Command(s.Bwrap, append(append(args, "--"), argv...)...), nil
	case IsolationNamespaces:
		return sandbox.NamespaceCommand(s.InitExe, m, argv, 0)
	case IsolationNone:
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = opt.Work
		return cmd, nil
	}
	return nil, fmt.Errorf("no sandbox command for isolation %q", s.Isolation)
}
