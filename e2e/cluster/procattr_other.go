//go:build !linux

package cluster

import "os/exec"

// dieWithTest: the parent-death signal is Linux's; elsewhere the test's
// cleanups stop what it started.
func dieWithTest(*exec.Cmd) {}
