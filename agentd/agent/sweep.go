package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
)

// Swept is what a sweep removed.
type Swept struct {
	// Workspaces are job workspaces under WorkRoot.
	Workspaces []string
	// SocketDirs are plugin socket directories in the temp dir.
	SocketDirs []string
	// Cgroups are step cgroup directories.
	Cgroups []string
}

// Empty reports whether the sweep removed nothing.
func (s Swept) Empty() bool { return len(s.Workspaces)+len(s.SocketDirs)+len(s.Cgroups) == 0 }

// workLockName is the lock file in WorkRoot that the runner holds while
// it lives.
const workLockName = ".lock"

// Sweep removes what a killed agent and its plugins left behind: the job
// workspaces under WorkRoot that no job of this runner is using, the
// plugin socket directories of agents that no longer run
// (pluginhost.SweepSocketDirs) and the step cgroups of plugins that no
// longer run (sandbox.SweepCgroups). Workspaces are swept only while this
// runner holds WorkRoot's lock, which it takes at its first sweep or job
// and keeps until Close or the end of the process (the kernel drops it when the
// process dies): another agentd on the same state dir may be running the
// workspaces this one does not know. The agent calls Sweep at start; Run
// calls it after each job. It returns what it removed, and every error
// joined (it goes on past each).
func (r *PluginRunner) Sweep() (Swept, error) {
	var out Swept
	var errs []error
	if r.WorkRoot != "" {
		ws, err := r.sweepWorkspaces()
		out.Workspaces = ws
		errs = append(errs, err)
	}
	dirs, err := pluginhost.SweepSocketDirs("")
	out.SocketDirs = dirs
	errs = append(errs, err)
	cgs, err := sandbox.SweepCgroups(r.CgroupRoot)
	out.Cgroups = cgs
	errs = append(errs, err)
	return out, errors.Join(errs...)
}

// lockWorkRoot takes WorkRoot's lock unless this runner holds it already;
// r.mu must be held.
func (r *PluginRunner) lockWorkRoot() error {
	if r.lock != nil {
		return nil
	}
	if err := os.MkdirAll(r.WorkRoot, 0o700); err != nil {
		return fmt.Errorf("sweep workspaces: %w", err)
	}
	path := filepath.Join(r.WorkRoot, workLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sweep workspaces: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("sweep workspaces: another agentd holds %s; its workspaces are left alone", path)
		}
		return fmt.Errorf("sweep workspaces: lock %s: %w", path, err)
	}
	r.lock = f
	return nil
}

// sweepWorkspaces removes the workspaces of WorkRoot that no job of this
// runner uses. It holds r.mu throughout, so a job cannot create its
// workspace between the listing and a removal.
func (r *PluginRunner) sweepWorkspaces() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.lockWorkRoot(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(r.WorkRoot)
	if err != nil {
		return nil, fmt.Errorf("sweep workspaces: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		path := filepath.Join(r.WorkRoot, e.Name())
		if strings.HasPrefix(e.Name(), ".") || r.active[path] {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, fmt.Errorf("sweep workspace: %w", err))
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// enter marks workspace path as in use by a job of this runner. It takes
// WorkRoot's lock if no one holds it, so that another agentd's sweep on
// the same state dir leaves the workspace alone even when this runner
// never swept; a lock held elsewhere does not stop the job.
func (r *PluginRunner) enter(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.lockWorkRoot()
	if r.active == nil {
		r.active = map[string]bool{}
	}
	r.active[path] = true
}

// leave marks workspace path as no longer in use.
func (r *PluginRunner) leave(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.active, path)
}

// Close releases WorkRoot's lock.
func (r *PluginRunner) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lock == nil {
		return nil
	}
	err := r.lock.Close()
	r.lock = nil
	return err
}
