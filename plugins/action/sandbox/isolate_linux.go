package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// systemDirs are bound read-only into a bubblewrap sandbox when they are
// directories, or recreated as the same symlinks (merged /usr).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// hiddenFiles are covered with /dev/null inside the sandbox.
var hiddenFiles = []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers"}

// bwrapArgs are bubblewrap's options for policy p.
func bwrapArgs(p Policy) []string {
	args := []string{
		"--die-with-parent",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", "byoc-step",
		"--cap-drop", "ALL",
		"--dev", "/dev",
		"--proc", "/proc",
		"--tmpfs", "/tmp",
	}
	if !p.Network {
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
	work, err := filepath.Abs(p.WorkDir)
	if err != nil {
		work = p.WorkDir
	}
	args = append(args, "--bind", work, work)
	if p.StateDir != "" {
		state, err := filepath.Abs(p.StateDir)
		if err != nil {
			state = p.StateDir
		}
		args = append(args, "--bind", state, state)
	}
	args = append(args,
		"--chdir", work,
		// The root itself is a tmpfs that bubblewrap made for the mounts;
		// nothing may be written there either.
		"--remount-ro", "/",
	)
	return args
}

// procAttr isolates the command itself at LevelNamespaces; at the other
// levels it only ties the command's life to the plugin's.
func procAttr(level Level, network bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if level == LevelNamespaces {
		a.Cloneflags = nsFlags(network)
	}
	return a
}

func nsFlags(network bool) uintptr {
	f := uintptr(syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS)
	if !network {
		f |= syscall.CLONE_NEWNET
	}
	return f
}

// probeNamespaces checks that this process may create the namespaces
// LevelNamespaces uses, and returns why not if it may not.
func probeNamespaces(ctx context.Context) string {
	cmd := exec.CommandContext(ctx, "/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: nsFlags(false)}
	if err := cmd.Run(); err != nil {
		return fmt.Sprintf("creating namespaces failed: %v", strings.TrimSpace(err.Error()))
	}
	return ""
}
