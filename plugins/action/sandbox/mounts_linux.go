package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	// network namespace of its own with nothing in it but its loopback
	// (and Egress's relay on it).
	Network bool
	// Egress, when set (and Network is not), is the relay to the
	// agent's egress proxy: the sandbox's only way out. The namespace
	// init runs it itself; with bubblewrap the caller wraps its command
	// in RelayCommand.
	Egress *Relay `json:"egress,omitempty"`
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
	// Hidden are host paths kept out of reach even where they lie inside
	// a directory the sandbox shows (an agent state directory under
	// /etc, a secrets file in a directory bound read-only): a hidden
	// directory shows empty and read-only, a hidden file empty. Paths
	// the sandbox does not show anyway need nothing.
	Hidden []string
	// Binds are host directories bound read-write at another path (a
	// cgroup the agent delegated, at /sys/fs/cgroup).
	Binds []Bind
	// ShareCgroupNS keeps the host's cgroup namespace (bubblewrap makes a
	// new one otherwise): a delegated cgroup v2 needs it.
	ShareCgroupNS bool
}

// mountOp is one bind or mask of Mounts, in the order they are made.
type mountOp struct {
	Kind int    `json:"kind"`
	Path string `json:"path"`
	// Src is what is bound at Path when it is not Path itself.
	Src string `json:"src,omitempty"`
}

// source is the host path bound at o.Path.
func (o mountOp) source() string {
	if o.Src != "" {
		return o.Src
	}
	return o.Path
}

const (
	opBind = iota
	opROBind
	opMaskDir
	opMaskFile
)

// ops are m's binds and the masks of its visible Hidden paths, parents
// before children (a bind inside a hidden directory comes after its
// mask; a mask inside a bound directory after its bind).
func (m Mounts) ops() []mountOp {
	var ops []mountOp
	for _, d := range m.Writable {
		ops = append(ops, mountOp{Kind: opBind, Path: abs(d)})
	}
	for _, d := range m.ReadOnly {
		ops = append(ops, mountOp{Kind: opROBind, Path: abs(d)})
	}
	for _, b := range m.Binds {
		ops = append(ops, mountOp{Kind: opBind, Path: filepath.Clean(b.Dst), Src: abs(b.Src)})
	}
	var shown []string
	for _, d := range systemDirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			shown = append(shown, r)
		}
	}
	for _, o := range ops {
		shown = append(shown, o.Path)
	}
	for _, h := range m.Hidden {
		r, err := filepath.EvalSymlinks(abs(h))
		if err != nil {
			continue // not there: nothing to hide
		}
		if !slices.ContainsFunc(shown, func(d string) bool { return r == d || strings.HasPrefix(r, d+"/") || d == "/" }) {
			continue
		}
		fi, err := os.Stat(r)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			ops = append(ops, mountOp{Kind: opMaskDir, Path: r})
		} else {
			ops = append(ops, mountOp{Kind: opMaskFile, Path: r})
		}
	}
	slices.SortStableFunc(ops, func(a, b mountOp) int {
		return strings.Count(filepath.Clean(a.Path), "/") - strings.Count(filepath.Clean(b.Path), "/")
	})
	return ops
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
		"--unshare-pid", "--unshare-ipc", "--unshare-uts",
	}
	if !m.ShareCgroupNS {
		args = append(args, "--unshare-cgroup-try")
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
	var masked []string
	for _, o := range m.ops() {
		switch o.Kind {
		case opBind:
			args = append(args, "--bind", o.source(), o.Path)
		case opROBind:
			args = append(args, "--ro-bind", o.Path, o.Path)
		case opMaskDir:
			args = append(args, "--tmpfs", o.Path)
			masked = append(masked, o.Path)
		case opMaskFile:
			args = append(args, "--ro-bind", "/dev/null", o.Path)
		}
	}
	for _, d := range masked {
		args = append(args, "--remount-ro", d)
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
