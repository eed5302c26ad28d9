package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/plugins/action/sandbox"
)

// Isolation is how a plugin process and everything it starts are kept
// away from the agent's own files.
type Isolation string

// The isolations, best first.
const (
	// IsolationBubblewrap: bubblewrap builds the plugin a file system of
	// its own (the system directories read-only, its job's workspace,
	// its component's state directory and its socket directory, nothing
	// else of the host), its own user, PID, IPC and UTS namespaces, a
	// new /proc, a private /tmp, no capabilities.
	IsolationBubblewrap Isolation = "bubblewrap"
	// IsolationNamespaces: the same file system and namespaces, built by
	// the agent's own init (agentd sandbox-init) when bubblewrap is not
	// installed or does not work.
	IsolationNamespaces Isolation = "namespaces"
	// IsolationNone: the plugin sees what the agent sees. Only with
	// agentd --insecure-no-sandbox.
	IsolationNone Isolation = "none-insecure"
)

// Sandbox is how the Loader isolates plugins.
type Sandbox struct {
	Isolation Isolation
	// Bwrap is bubblewrap's path (IsolationBubblewrap).
	Bwrap string
	// InitExe serves sandbox.InitArg: the namespace sandbox's init
	// (IsolationNamespaces) and, under bubblewrap, the egress relay
	// (NetworkProxy). The agent's own binary.
	InitExe string
	// Detail says what was found: bubblewrap's version, or why the
	// better isolations are not in use.
	Detail string
}

// SandboxOptions configure ProbeSandbox.
type SandboxOptions struct {
	// Mode is "auto" (or empty: bubblewrap, else namespaces),
	// "bubblewrap" or "namespaces": only that one.
	Mode string
	// Insecure allows IsolationNone when no sandbox can be built
	// (agentd --insecure-no-sandbox); without it ProbeSandbox fails.
	Insecure bool
	// Bwrap is bubblewrap's path; looked up in PATH when empty.
	Bwrap string
	// InitExe is the binary serving sandbox.InitArg (agentd itself).
	InitExe string
}

// ProbeSandbox finds the best isolation that works here, by building a
// sandbox for a trivial command. It fails, saying why, when none works,
// unless opt.Insecure; then the Sandbox is IsolationNone and Detail says
// why.
func ProbeSandbox(ctx context.Context, opt SandboxOptions) (*Sandbox, error) {
	if opt.Insecure {
		return &Sandbox{Isolation: IsolationNone, Detail: "agentd --insecure-no-sandbox: vendor code runs with the agent's own view of the file system"}, nil
	}
	var why []string
	if opt.Mode == "" || opt.Mode == "auto" || opt.Mode == "bubblewrap" {
		s, err := probeBwrap(ctx, opt.Bwrap)
		if err == nil {
			s.InitExe = opt.InitExe
			return s, nil
		}
		why = append(why, err.Error())
	}
	if opt.Mode == "" || opt.Mode == "auto" || opt.Mode == "namespaces" {
		switch {
		case opt.InitExe == "":
			why = append(why, "no init binary for the namespace sandbox")
		default:
			err := sandbox.ProbeNamespaces(ctx, opt.InitExe)
			if err == nil {
				s := &Sandbox{Isolation: IsolationNamespaces, InitExe: opt.InitExe, Detail: "user, mount, PID, IPC and UTS namespaces built by agentd " + sandbox.InitArg}
				if len(why) > 0 {
					s.Detail += " (" + strings.Join(why, "; ") + ")"
				}
				return s, nil
			}
			why = append(why, "Linux namespaces: "+err.Error())
		}
	}
	if len(why) == 0 {
		return nil, fmt.Errorf("sandbox mode %q: want auto, bubblewrap or namespaces", opt.Mode)
	}
	return nil, fmt.Errorf("no sandbox for vendor code can be built here: %s; install bubblewrap or allow unprivileged user namespaces "+
		"(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0), or start agentd with --insecure-no-sandbox "+
		"to run vendor code with the agent's own view of its files", strings.Join(why, "; "))
}

func probeBwrap(ctx context.Context, path string) (*Sandbox, error) {
	if path == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, errors.New("bubblewrap (bwrap) is not installed")
		}
		path = p
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("bubblewrap at %s does not run (%v)", path, err)
	}
	ver := strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("", "byoc-sandbox-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	m := pluginMounts(dir, "", StartOptions{})
	args := append(append(m.BwrapArgs(), "--"), "/bin/true")
	if out, err := exec.CommandContext(ctx, path, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s cannot build a sandbox here (%v: %s)", ver, err, strings.TrimSpace(string(out)))
	}
	return &Sandbox{Isolation: IsolationBubblewrap, Bwrap: path, Detail: ver}, nil
}

// Describe says in one line what a plugin sees, for the agent's log and
// preflight.
func (s *Sandbox) Describe() string {
	if s == nil || s.Isolation == IsolationNone {
		return "NONE (--insecure-no-sandbox): vendor code can read and write everything the agent can, its identity and the customer's controls included"
	}
	return fmt.Sprintf("%s (%s): each plugin and all it starts see only the system directories (read-only), their job's workspace, "+
		"their component's state directory and what their type needs; the agent's state, secrets file and other plugins do not exist there", s.Isolation, s.Detail)
}

// pluginMounts is the file system of a plugin working in work with its
// socket in sockDir.
func pluginMounts(work, sockDir string, opt StartOptions) sandbox.Mounts {
	var ro []string
	for _, p := range opt.ReadOnly {
		// What is not there is not bound: a missing file stays missing.
		if _, err := os.Stat(p); err == nil {
			ro = append(ro, p)
		}
	}
	m := sandbox.Mounts{
		Writable:    []string{work},
		ReadOnly:    ro,
		Chdir:       work,
		Hostname:    "byoc-plugin",
		UnshareUser: true,
		TmpReadOnly: true,
		Hidden:      opt.Hidden,
	}
	if sockDir != "" {
		m.Writable = append(m.Writable, sockDir)
	}
	m.Writable = append(m.Writable, opt.Writable...)
	return m
}

// sandboxCommand is the command that runs the open binary exe as
// argv[0] args... inside s, executed through its descriptor as
// /proc/self/fd/3 so that the bytes that run are those that were checked.
func (s *Sandbox) command(exe *os.File, m sandbox.Mounts, args []string) (*exec.Cmd, error) {
	inner := append([]string{"/proc/self/fd/3"}, args...)
	var cmd *exec.Cmd
	switch s.Isolation {
	case IsolationBubblewrap:
		if m.Egress != nil {
			// bubblewrap built the network namespace; the agent's own
			// binary (descriptor 4) runs the relay in it and the plugin
			// as its child.
			if s.InitExe == "" {
				return nil, errors.New("the egress relay needs the agent's own binary (Sandbox.InitExe)")
			}
			self, err := os.Open(s.InitExe)
			if err != nil {
				return nil, fmt.Errorf("egress relay: %w", err)
			}
			if inner, err = sandbox.RelayCommand(4, *m.Egress, inner, 1); err != nil {
				self.Close()
				return nil, err
			}
			cmd = exec.Command(s.Bwrap, append(append(m.BwrapArgs(), "--"), inner...)...)
			cmd.ExtraFiles = []*os.File{exe, self}
			return cmd, nil
		}
		cmd = exec.Command(s.Bwrap, append(append(m.BwrapArgs(), "--"), inner...)...)
	case IsolationNamespaces:
		var err error
		if cmd, err = sandbox.NamespaceCommand(s.InitExe, m, inner, 1); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no sandbox command for isolation %q", s.Isolation)
	}
	cmd.ExtraFiles = []*os.File{exe}
	return cmd, nil
}

// pluginPID finds the plugin process itself inside the sandbox whose
// outermost process is pid: under bubblewrap, the child of its PID
// namespace's init, which is the child of bubblewrap; under the
// namespace init, that init (which passes signals on).
func (s *Sandbox) pluginPID(pid int) int {
	if s == nil || s.Isolation != IsolationBubblewrap {
		return pid
	}
	for range 2 {
		c := childOf(pid)
		if c == 0 {
			return pid
		}
		pid = c
	}
	return pid
}

// childOf returns the oldest child of pid (the lowest pid), or 0.
func childOf(pid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	best := 0
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, _ := strconv.Atoi(f[1]); pp == pid && (best == 0 || p < best) {
			best = p
		}
	}
	return best
}
