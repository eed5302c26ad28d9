// Package sandbox runs one command isolated from the machine the agent
// runs on: read-only system root, private /tmp, a writable work directory
// and nothing else, no network unless asked for, exactly the environment
// given, its own PID, IPC and UTS namespaces and no capabilities, under
// CPU, memory and process-count limits.
//
// Isolation comes from bubblewrap when it is installed and works, from
// Linux namespaces set up by the kernel at clone time otherwise (no file
// system isolation), and from nothing when neither works. Limits come from
// cgroups, v1 or v2, when the cgroup file system is writable. Whatever was
// not applied is reported by [Sandbox.Warnings]; the caller must log it:
// the sandbox never falls back silently.
//
// The same file system isolation is offered to any process through
// [Mounts]: bubblewrap's arguments ([Mounts.BwrapArgs]) or, without
// bubblewrap, a namespace sandbox built by a small init the caller's own
// binary serves ([NamespaceCommand], [InitMain]). agentd runs every
// plugin that way (agentd/pluginhost); an action's steps then run in a
// second sandbox nested in the plugin's.
//
// The package is Linux-only, as the agent is.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Level is how well a command is isolated.
type Level string

// Isolation levels, best first.
const (
	// LevelBubblewrap: bubblewrap's mount, PID, IPC, UTS and (without
	// network) network namespaces, read-only system root, all
	// capabilities dropped.
	LevelBubblewrap Level = "bubblewrap"
	// LevelNamespaces: PID, IPC, UTS, mount and (without network) network
	// namespaces from clone flags; the file system is the host's.
	LevelNamespaces Level = "namespaces"
	// LevelNone: a plain child process.
	LevelNone Level = "none"
)

// Limits are the resources a command may use; zero means no limit.
type Limits struct {
	MemoryBytes int64
	// CPUs is a share of CPU time: 0.5 is half a core.
	CPUs float64
	PIDs int
}

// Policy says how one command runs.
type Policy struct {
	// WorkDir is the command's working directory and, with StateDir, the
	// only host directory it may write. Required.
	WorkDir string
	// StateDir, if set, is the component's persistent state directory,
	// writable like WorkDir.
	StateDir string
	// Network lets the command use the host's network.
	Network bool
	// Env is the command's whole environment.
	Env    []string
	Limits Limits
	// Stdout and Stderr receive the command's output.
	Stdout, Stderr io.Writer
	// WaitDelay bounds how long Run waits for output after the command
	// exits (a background process may hold the pipes).
	WaitDelay time.Duration
}

// Result is how a command ended.
type Result struct {
	// ExitCode is the exit code, or 128+n when killed by signal n.
	ExitCode int
	// OOMKilled reports that the kernel killed it for exceeding its
	// memory limit.
	OOMKilled bool
}

// Sandbox runs commands at the best isolation this machine offers.
type Sandbox struct {
	level    Level
	bwrap    string
	bwrapVer string
	// bindProc: nested in a plugin sandbox, the step gets its /proc.
	bindProc bool
	cg       cgroups
	warnings []string
}

// Options configure [New].
type Options struct {
	// Bwrap is the bubblewrap binary; found in PATH when empty.
	Bwrap string
	// DisableBubblewrap skips bubblewrap, as if it were not installed.
	DisableBubblewrap bool
	// CgroupRoot is where cgroup file systems are mounted
	// (/sys/fs/cgroup when empty).
	CgroupRoot string
}

var (
	probeMu    sync.Mutex
	probeCache = map[Options]*Sandbox{}
)

// New probes what isolation works here and returns a Sandbox using the
// best of it. Probing runs a trivial command, once per process and
// options.
func New(ctx context.Context, opt Options) *Sandbox {
	probeMu.Lock()
	defer probeMu.Unlock()
	if s, ok := probeCache[opt]; ok {
		return s
	}
	s := &Sandbox{level: LevelNone}
	s.probe(ctx, opt)
	probeCache[opt] = s
	return s
}

func (s *Sandbox) probe(ctx context.Context, opt Options) {
	bwrapWhy := "bubblewrap is disabled"
	if !opt.DisableBubblewrap {
		bwrapWhy = s.probeBwrap(ctx, opt.Bwrap)
	}
	if s.level == LevelNone {
		nsWhy := probeNamespaces(ctx)
		if nsWhy == "" {
			s.level = LevelNamespaces
			s.warnings = append(s.warnings, fmt.Sprintf("%s; isolating with Linux namespaces only: "+
				"own PID, IPC, UTS and mount namespaces and no network, but the file system is NOT read-only "+
				"and /proc still lists the host's processes (install bubblewrap for both)", bwrapWhy))
		} else {
			s.warnings = append(s.warnings, fmt.Sprintf("%s and Linux namespaces are not available (%s): "+
				"the step runs WITHOUT isolation, with only a clean environment", bwrapWhy, nsWhy))
		}
	}
	var why string
	s.cg, why = detectCgroups(opt.CgroupRoot)
	if s.cg == nil {
		s.warnings = append(s.warnings, "no CPU, memory or process limits: "+why)
	}
}

// probeBwrap checks that bubblewrap runs a command with the flags Run
// uses, and returns why not if it does not.
func (s *Sandbox) probeBwrap(ctx context.Context, path string) string {
	if path == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return "bubblewrap (bwrap) is not installed"
		}
		path = p
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return fmt.Sprintf("bubblewrap at %s does not run (%v)", path, err)
	}
	s.bwrapVer = strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("", "byoc-sandbox-probe-")
	if err != nil {
		return fmt.Sprintf("bubblewrap probe: %v", err)
	}
	defer os.RemoveAll(dir)
	args := append(bwrapArgs(Policy{WorkDir: dir}, false), "--", "/bin/true")
	if out, err := exec.CommandContext(ctx, path, args...).CombinedOutput(); err != nil {
		why := fmt.Sprintf("%s cannot create a sandbox here (%v: %s)", s.bwrapVer, err, strings.TrimSpace(string(out)))
		if os.Getenv(NestedEnv) == "" {
			return why
		}
		// Inside a plugin's sandbox: its /proc shows only its own
		// processes, and a new one cannot be mounted.
		args := append(bwrapArgs(Policy{WorkDir: dir}, true), "--", "/bin/true")
		if out, err := exec.CommandContext(ctx, path, args...).CombinedOutput(); err != nil {
			return fmt.Sprintf("%s; nor with the plugin sandbox's /proc (%v: %s)", why, err, strings.TrimSpace(string(out)))
		}
		s.bindProc = true
	}
	s.level, s.bwrap = LevelBubblewrap, path
	return ""
}

// Level returns the isolation Run applies.
func (s *Sandbox) Level() Level { return s.level }

// Warnings says what isolation is missing and why; empty when all of it
// is applied.
func (s *Sandbox) Warnings() []string { return s.warnings }

// Describe says in one line what Run applies to a command with policy p,
// for the job log.
func (s *Sandbox) Describe(p Policy) string {
	var parts []string
	net := "no network"
	if p.Network {
		net = "host network (the action asks for it)"
		if os.Getenv(NestedEnv) != "" {
			net = "the plugin sandbox's network (the action asks for it)"
		}
	}
	switch s.level {
	case LevelBubblewrap:
		writable := "writable work dir only"
		if p.StateDir != "" {
			writable = "writable work dir and component state dir only"
		}
		parts = append(parts, fmt.Sprintf("%s: read-only system root (/usr, /etc; nothing else of the host), private /tmp, %s, %s, "+
			"clean environment, own PID/IPC/UTS namespaces, no capabilities", s.bwrapVer, writable, net))
	case LevelNamespaces:
		parts = append(parts, fmt.Sprintf("Linux namespaces: own PID/IPC/UTS/mount namespaces, %s, clean environment; host file system writable", net))
	default:
		parts = append(parts, "no isolation: clean environment only")
	}
	if s.cg != nil {
		parts = append(parts, fmt.Sprintf("cgroup %s limits: %s", s.cg.version(), describeLimits(p.Limits)))
	} else {
		parts = append(parts, "no resource limits")
	}
	return strings.Join(parts, "; ")
}

func describeLimits(l Limits) string {
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", l.MemoryBytes>>20))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%g CPU", l.CPUs))
	}
	if l.PIDs > 0 {
		parts = append(parts, fmt.Sprintf("%d processes", l.PIDs))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Run runs argv under policy p and waits for it. When ctx ends, the
// command and everything it started are killed and Run returns ctx's
// error along with the result. An error without a result means the
// command could not be started.
func (s *Sandbox) Run(ctx context.Context, p Policy, argv []string) (Result, error) {
	if p.WorkDir == "" || len(argv) == 0 {
		return Result{}, errors.New("sandbox: work dir and command are required")
	}
	var group cgroup
	if s.cg != nil {
		g, err := s.cg.create(p.Limits)
		if err != nil {
			return Result{}, fmt.Errorf("sandbox: %w", err)
		}
		group = g
		defer group.remove()
	}
	cmdArgs := argv
	if s.level == LevelBubblewrap {
		cmdArgs = append(append(append([]string{s.bwrap}, bwrapArgs(p, s.bindProc)...), "--"), argv...)
	}
	if group != nil {
		// The command joins its cgroups itself before it execs, so that
		// nothing it starts can escape the limits: a small shell writes its
		// own pid into each cgroup.procs, then becomes the command.
		files := group.procsFiles()
		pre := []string{"/bin/sh", "-c", `n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ >"$1" || exit 125; shift; n=$((n-1)); done; exec "$@"`, "byoc-sandbox", fmt.Sprint(len(files))}
		cmdArgs = append(append(pre, files...), cmdArgs...)
	}
	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Dir = p.WorkDir
	cmd.Env = p.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	cmd.WaitDelay = p.WaitDelay
	cmd.SysProcAttr = procAttr(s.level, p.Network)
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("sandbox: start %s: %w", argv[0], err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			if group != nil {
				group.kill()
			}
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	<-stopped
	if group != nil {
		// Whatever the command left running dies with it.
		group.kill()
	}
	res := Result{ExitCode: exitCode(cmd)}
	if group != nil {
		res.OOMKilled = group.oomKilled()
	}
	if ctx.Err() != nil {
		return res, context.Cause(ctx)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return res, fmt.Errorf("sandbox: %w", err)
	}
	return res, nil
}

// exitCode reports a finished command's exit code the way a shell does:
// 128+n for a command killed by signal n.
func exitCode(cmd *exec.Cmd) int {
	st := cmd.ProcessState
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
