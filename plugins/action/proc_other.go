//go:build !linux

package action

import "syscall"

// stepProcAttr has no parent-death signal to offer outside Linux; the
// host's process-group kill still covers scripts.
func stepProcAttr() *syscall.SysProcAttr { return nil }
