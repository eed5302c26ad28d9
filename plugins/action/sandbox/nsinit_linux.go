package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitArg is the first argument that makes a binary serve [InitMain]:
// agentd answers "agentd sandbox-init SPEC" with it.
const InitArg = "sandbox-init"

// initSpec is what the parent tells the init, as JSON in its argument.
type initSpec struct {
	Mounts Mounts `json:"mounts"`
	// Ops are Mounts' binds and masks, worked out by the parent: the
	// init no longer sees the host's paths where it mounts.
	Ops  []mountOp `json:"ops"`
	Argv []string  `json:"argv"`
	// Files is how many descriptors from 3 on the command inherits (a
	// verified binary executed as /proc/self/fd/3).
	Files int `json:"files"`
	// Relay, when set, is started before the command: Mounts.Egress in
	// a namespace sandbox, or the whole job of a relay in a sandbox
	// bubblewrap built (RelayOnly: no file system, no user namespace,
	// the command runs as the relay's child).
	Relay     *Relay `json:"relay,omitempty"`
	RelayOnly bool   `json:"relay_only,omitempty"`
}

func jsonSpec(s initSpec) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// NamespaceCommand returns the command that runs argv in a sandbox of
// Linux namespaces without bubblewrap: exe (a binary whose main calls
// InitMain for InitArg, such as agentd) is started by the kernel in new
// user, mount, PID, IPC and UTS namespaces (and network, unless
// m.Network); it builds the file system m describes on a fresh root,
// then starts argv as an unprivileged user with no capabilities, stays
// as the namespace's init (reaping orphans, passing on signals) and
// exits with its status. files are the descriptors argv inherits as 3,
// 4, …; the caller sets them as the returned command's ExtraFiles.
// Go cannot run code between clone and exec, hence the second program.
func NamespaceCommand(exe string, m Mounts, argv []string, files int) (*exec.Cmd, error) {
	if m.Egress != nil && m.Network {
		return nil, errors.New("sandbox: an egress relay needs a network namespace of its own (Network false)")
	}
	spec, err := jsonSpec(initSpec{Mounts: m, Ops: m.ops(), Argv: argv, Files: files, Relay: m.Egress})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, InitArg, spec)
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if !m.Network {
		flags |= syscall.CLONE_NEWNET
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: flags,
		// The init is root in its own user namespace only: enough to
		// mount there, nothing on the host. The command runs in a nested
		// user namespace as an unprivileged user (InnerIDs), so it starts
		// with no capabilities and can build a sandbox of its own.
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	return cmd, nil
}

// ProbeNamespaces checks that exe builds a namespace sandbox here, by
// running /bin/true in one, and returns why not if it does not.
func ProbeNamespaces(ctx context.Context, exe string) error {
	dir, err := os.MkdirTemp("", "byoc-sandbox-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmd, err := NamespaceCommand(exe, Mounts{Writable: []string{dir}, Chdir: dir}, []string{"/bin/true"}, 0)
	if err != nil {
		return err
	}
	cmd.Dir = dir
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// InitMain is the init of a namespace sandbox (see NamespaceCommand);
// args are the arguments after InitArg. It returns the exit code.
func InitMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "byoc sandbox-init: want one argument (started by the agent, not by hand)")
		return 125
	}
	var spec initSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil || len(spec.Argv) == 0 {
		fmt.Fprintf(os.Stderr, "byoc sandbox-init: bad spec: %v\n", err)
		return 125
	}
	if spec.RelayOnly {
		return relayMain(spec)
	}
	// Mounts, pivot_root and the chdir apply to this thread's view; keep
	// the work on one thread until the command starts.
	runtime.LockOSThread()
	if err := buildRoot(spec.Mounts, spec.Ops); err != nil {
		fmt.Fprintf(os.Stderr, "byoc sandbox-init: %v\n", err)
		return 125
	}
	if spec.Relay != nil {
		// The namespace's own loopback, down until now, carries the
		// relay; nothing else is there.
		if err := loopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "byoc sandbox-init: %v\n", err)
			return 125
		}
		if err := startRelay(*spec.Relay); err != nil {
			fmt.Fprintf(os.Stderr, "byoc sandbox-init: %v\n", err)
			return 125
		}
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	for i := range spec.Files {
		cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(3+i), fmt.Sprintf("fd%d", 3+i)))
	}
	uid, gid := InnerIDs()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: 0, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "byoc sandbox-init: start %s: %v\n", spec.Argv[0], err)
		return 127
	}
	return waitChild(cmd.Process.Pid, sigs)
}

// relayMain serves a relay in a sandbox someone else built: it starts
// the relay, then the command as its child, and waits for it.
func relayMain(spec initSpec) int {
	if spec.Relay == nil {
		fmt.Fprintln(os.Stderr, "byoc sandbox-init: relay spec without a relay")
		return 125
	}
	if err := startRelay(*spec.Relay); err != nil {
		fmt.Fprintf(os.Stderr, "byoc sandbox-init: %v\n", err)
		return 125
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	p, err := relayChild(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "byoc sandbox-init: start %s: %v\n", spec.Argv[0], err)
		return 127
	}
	return waitChild(p.Pid, sigs)
}

// waitChild passes sigs on to child and reaps every process that ends
// (as a namespace's init, this process inherits every orphan) until
// child does; it returns child's status the way a shell reports it.
func waitChild(child int, sigs chan os.Signal) int {
	go func() {
		for s := range sigs {
			_ = syscall.Kill(child, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "byoc sandbox-init: wait: %v\n", err)
			return 125
		}
		if pid != child {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// buildRoot makes the file system m describes the process's root, as
// bubblewrap does: a tmpfs root holding only bind mounts of what is
// allowed, a new /dev, /proc and /tmp, read-only where it may be.
func buildRoot(m Mounts, ops []mountOp) error {
	// A bind's source is resolved while the host's root is still the
	// root: a symbolic link with an absolute target (a provider mirror
	// path that links elsewhere, say) would resolve against the new root
	// under /oldroot and not be found. The sandbox still shows it at the
	// path it was named by.
	for i, o := range ops {
		if o.Kind != opBind && o.Kind != opROBind {
			continue
		}
		if r, err := filepath.EvalSymlinks(o.source()); err == nil {
			ops[i].Src = r
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// A scratch tmpfs over /tmp (in this mount namespace only) becomes
	// the root for a moment; the host's root stays reachable at /oldroot
	// until everything is bound.
	const base = "/tmp"
	if err := unix.Mount("tmpfs", base, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("mount scratch tmpfs: %w", err)
	}
	for _, d := range []string{"newroot", "oldroot"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.PivotRoot(base, filepath.Join(base, "oldroot")); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	const nr, old = "/newroot", "/oldroot"
	if err := unix.Mount("tmpfs", nr, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(old + d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(old + d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, nr+d); err != nil {
				return err
			}
		case fi.IsDir():
			if err := bind(old+d, nr+d, true); err != nil {
				return err
			}
		}
	}
	for _, f := range hiddenFiles {
		if _, err := os.Stat(old + f); err == nil {
			if err := bind(old+"/dev/null", nr+f, true); err != nil {
				return err
			}
		}
	}
	if err := makeDev(old, nr+"/dev"); err != nil {
		return err
	}
	if err := os.Mkdir(nr+"/proc", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("proc", nr+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	// As bubblewrap does: what of /proc reaches the kernel as a whole is
	// read-only (the sandbox's user may map to the host's root).
	for _, p := range []string{"sys", "sysrq-trigger", "irq", "bus"} {
		if _, err := os.Stat(nr + "/proc/" + p); err == nil {
			if err := bind(nr+"/proc/"+p, nr+"/proc/"+p, true); err != nil {
				return err
			}
		}
	}
	if err := os.Mkdir(nr+"/tmp", 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", nr+"/tmp", "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=1777"); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	var masked []string
	for _, o := range ops {
		var err error
		switch o.Kind {
		case opBind, opROBind:
			err = bind(old+o.source(), nr+o.Path, o.Kind == opROBind)
		case opMaskDir:
			err = unix.Mount("tmpfs", nr+o.Path, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755")
			masked = append(masked, nr+o.Path)
		case opMaskFile:
			err = bind(old+"/dev/null", nr+o.Path, true)
		}
		if err != nil {
			return fmt.Errorf("mount %s: %w", o.Path, err)
		}
	}
	for _, d := range masked {
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", d, err)
		}
	}
	if m.TmpReadOnly {
		if err := unix.Mount("", nr+"/tmp", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("make /tmp read-only: %w", err)
		}
	}
	if err := unix.Unmount(old, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir(nr); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the scratch root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	hostname := m.Hostname
	if hostname == "" {
		hostname = "byoc-sandbox"
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if m.Chdir != "" {
		if err := unix.Chdir(abs(m.Chdir)); err != nil {
			return fmt.Errorf("chdir %s: %w", m.Chdir, err)
		}
	}
	return nil
}

// bind mounts src at dst (creating dst as a directory or an empty file
// like src), nosuid and nodev, read-only if ro.
func bind(src, dst string, ro bool) error { return bindFlags(src, dst, ro, true) }

// bindFlags is bind, with device files usable unless nodev.
func bindFlags(src, dst string, ro, nodev bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("bind %s: %w", strings.TrimPrefix(src, "/oldroot"), err)
	}
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if fi.IsDir() {
			err = os.Mkdir(dst, 0o755)
		} else {
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return err
		}
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", strings.TrimPrefix(src, "/oldroot"), err)
	}
	// A remount must keep the flags the mount's owner locked (nodev,
	// noexec, …) or the kernel refuses it.
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID)
	if nodev || st.Flags&unix.ST_NODEV != 0 {
		flags |= unix.MS_NODEV
	}
	for _, f := range [][2]uintptr{{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME}} {
		if uintptr(st.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	if ro || st.Flags&unix.ST_RDONLY != 0 {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", strings.TrimPrefix(src, "/oldroot"), err)
	}
	return nil
}

// makeDev builds a minimal /dev at dst from the host's devices under
// old: bubblewrap's --dev without the pseudo-terminals.
func makeDev(old, dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if _, err := os.Stat(old + "/dev/" + d); err != nil {
			continue
		}
		if err := bindFlags(old+"/dev/"+d, dst+"/"+d, false, false); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dst+"/"+name); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dst+"/shm", 0o1777); err != nil {
		return err
	}
	return nil
}
