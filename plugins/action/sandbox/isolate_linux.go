package sandbox

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// systemDirs are bound read-only into a bubblewrap sandbox when they are
// directories, or recreated as the same symlinks (merged /usr).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// hiddenFiles are covered with /dev/null inside the sandbox.
var hiddenFiles = []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers"}

// bwrapArgs are bubblewrap's options for policy p.
func bwrapArgs(p Policy, bindProc bool) []string {
	m := Mounts{Writable: []string{p.WorkDir}, Chdir: p.WorkDir, Hostname: "byoc-step", Network: p.Network, BindProc: bindProc}
	if p.StateDir != "" {
		m.Writable = append(m.Writable, p.StateDir)
	}
	return m.BwrapArgs()
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
