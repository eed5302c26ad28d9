package sandbox

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/internal/procowner"
)

// stepPrefix starts the name of every step cgroup, which goes on with the
// creating process's procowner tag: byoc-step-PID.START-RANDOM.
const stepPrefix = "byoc-step-"

// stepName names a new step cgroup after this process.
func stepName() (string, error) {
	me, err := procowner.Self()
	if err != nil {
		return "", err
	}
	return stepPrefix + me.String() + "-" + randomID(), nil
}

// SweepCgroups removes the step cgroups, and the cgroups delegated to
// plugins ([DelegateCgroup]) with all below them, that processes which no
// longer run left below this process's cgroup (root is where cgroup file systems are
// mounted, /sys/fs/cgroup when empty): those of an action plugin killed,
// with its agent, before it could remove them. A plugin runs in its
// agent's cgroup, so the agent's sweep looks where its plugins made them.
// Processes still in a leftover cgroup (a step that outlived its plugin)
// are killed first. Cgroups named after a running process, and any other,
// are left alone; so is a cgroup v1 controller whose own cgroup this
// process cannot see (its steps then go below the controller's root,
// shared with other machines' namespaces). Without a cgroup file system
// it does nothing. It returns the cgroup directories it removed, and the
// first error met (it goes on past it).
func SweepCgroups(root string) (removed []string, err error) {
	h, why := findCgroups(root)
	if why != "" {
		return nil, nil
	}
	for _, c := range slices.Sorted(maps.Keys(h.bases)) {
		if !h.own[c] {
			continue
		}
		base := h.bases[c]
		entries, rerr := os.ReadDir(base)
		if rerr != nil {
			if err == nil {
				err = fmt.Errorf("sweep step cgroups in %s: %w", base, rerr)
			}
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if rest, ok := strings.CutPrefix(name, jobPrefix); ok && e.IsDir() {
				// A cgroup the agent delegated to a plugin (DelegateCgroup),
				// with the step cgroups the plugin made in it.
				if owner, _, ok := procowner.Parse(rest); ok && !owner.Alive() {
					dir := filepath.Join(base, name)
					if rerr := removeTree(dir, h.v2); rerr != nil {
						if err == nil {
							err = fmt.Errorf("sweep job cgroup: %w", rerr)
						}
						continue
					}
					removed = append(removed, dir)
				}
				continue
			}
			owner, _, ok := procowner.Parse(strings.TrimPrefix(name, stepPrefix))
			if !e.IsDir() || !strings.HasPrefix(name, stepPrefix) || !ok || owner.Alive() {
				continue
			}
			dir := filepath.Join(base, name)
			if h.v2 && os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
				waitEmpty(filepath.Join(dir, "cgroup.procs"))
			} else {
				killAll(filepath.Join(dir, "cgroup.procs"))
			}
			if rerr := rmdirWithin(dir, time.Second); rerr != nil {
				if err == nil {
					err = fmt.Errorf("sweep step cgroup: %w", rerr)
				}
				continue
			}
			removed = append(removed, dir)
		}
	}
	return removed, err
}

// rmdirWithin removes a cgroup, retrying for up to d while the kernel
// still tears down its last process.
func rmdirWithin(dir string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rmdir %s: %w", dir, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
