package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
)

// Mounts is the file system a sandboxed process sees: the system
// directories read-only, a new /dev and /proc, a private /tmp, the paths
// named here at their own places, and nothing else of the host. Whatever
// is not named does not exist inside: not hidden behind a permission,
// absent.
type Mounts struct {
	// Writable are host directories bound read-write at the same path.
	Writable []string
	// ReadOnly are host files or directories bound read-only at the same
	// path.
	ReadOnly []string
	// Chdir is the working directory inside; required.
	Chdir string
	// Hostname is the sandbox's host name (its own UTS namespace).
	Hostname string
	// Network keeps the host's network; otherwise the process has a
	// network namespace of its own with nothing in it.
	Network bool
	// UnshareUser gives the sandbox a user namespace of its own, mapping
	// UID and GID (the agent's, or 1000 when the agent is root: an
	// unprivileged user inside, so that nothing it executes gains
	// capabilities and the sandbox can nest another, as the action type
	// does for its steps).
	UnshareUser bool
	// BindProc binds the current /proc instead of mounting a new one:
	// only for a sandbox nested in a plugin's, whose /proc is already the
	// sandbox's own (the kernel refuses a new /proc mount there, as the
	// outer /proc has read-only parts bound over it).
	BindProc bool
	// TmpReadOnly makes the private /tmp read-only once the paths under
	// it are bound: the directories leading to a bound path then cannot
	// be written either (a plugin gets TMPDIR in its workspace).
	TmpReadOnly bool
}

// NestedEnv is set in the environment of every sandboxed plugin
// (agentd's pluginhost) to the plugin sandbox's isolation; the action
// type's step sandbox then knows its /proc is private already.
const NestedEnv = "BYOC_PLUGIN_SANDBOX"

// InnerIDs are the user and group a sandbox with its own user namespace
// runs as: the caller's own, or 1000 for root.
func InnerIDs() (uid, gid int) {
	uid, gid = os.Getuid(), os.Getgid()
	if uid == 0 {
		return 1000, 1000
	}
	return uid, gid
}

// BwrapArgs are bubblewrap's options for m, up to (not including) "--".
func (m Mounts) BwrapArgs() []string {
	args := []string{
		"--die-with-parent",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
	}
	if m.UnshareUser {
		uid, gid := InnerIDs()
		args = append(args, "--unshare-user", "--uid", strconv.Itoa(uid), "--gid", strconv.Itoa(gid))
	}
	hostname := m.Hostname
	if hostname == "" {
		hostname = "byoc-sandbox"
	}
	args = append(args,
		"--hostname", hostname,
		"--cap-drop", "ALL",
		"--dev", "/dev",
	)
	if m.BindProc {
		args = append(args, "--ro-bind", "/proc", "/proc")
	} else {
		args = append(args, "--proc", "/proc")
	}
	args = append(args,
		// Before the binds: a bound path under /tmp is bound onto this
		// tmpfs, not hidden by it.
		"--tmpfs", "/tmp",
	)
	if !m.Network {
		args = append(args, "--unshare-net")
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	for _, f := range hiddenFiles {
		if _, err := os.Stat(f); err == nil {
			args = append(args, "--ro-bind", "/dev/null", f)
		}
	}
	for _, d := range m.Writable {
		d = abs(d)
		args = append(args, "--bind", d, d)
	}
	for _, d := range m.ReadOnly {
		d = abs(d)
		args = append(args, "--ro-bind", d, d)
	}
	if m.TmpReadOnly {
		args = append(args, "--remount-ro", "/tmp")
	}
	args = append(args,
		"--chdir", abs(m.Chdir),
		// The root itself is a tmpfs that bubblewrap made for the mounts;
		// nothing may be written there either.
		"--remount-ro", "/",
	)
	return args
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
