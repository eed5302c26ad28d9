package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/internal/procowner"
)

// CgroupEnv is set in the environment of a plugin that the agent
// delegated a cgroup to ([DelegateCgroup]), to that cgroup's version,
// "v1" or "v2". The plugin's step sandbox then finds the delegated
// cgroup, writable, at /sys/fs/cgroup (v2) or /sys/fs/cgroup/CONTROLLER
// (v1) and puts each step's cgroup directly below it.
const CgroupEnv = "BYOC_PLUGIN_CGROUP"

// jobPrefix starts the name of every delegated cgroup, which goes on with
// the creating agent's procowner tag: byoc-job-PID.START-LABEL-RANDOM.
const jobPrefix = "byoc-job-"

// delegatedControllers are the controllers a step's limits use.
var delegatedControllers = []string{"cpu", "memory", "pids"}

// Bind is a host path bound read-write at another path inside a sandbox.
type Bind struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

// Delegated is a cgroup the agent made for one plugin process, to be
// managed from inside the plugin's sandbox (the kernel's cgroup
// delegation): the plugin creates one sub-cgroup per step with the
// step's limits. In v2 the plugin process itself starts in the leaf
// "plugin" below it ([Delegated.LeafFD]), as no process may live in a
// cgroup whose controllers are enabled for its children; in v1 the
// plugin stays where it is and only its steps join the delegated
// hierarchy.
type Delegated struct {
	// Version is "v1" or "v2".
	Version string
	// dirs maps a controller ("" in v2) to the job cgroup on the host.
	dirs map[string]string
}

// DelegateCgroup creates a cgroup for one plugin process below this
// process's own (root is where cgroup file systems are mounted,
// /sys/fs/cgroup when empty), with the cpu, memory and pids controllers
// available to its children; label (a job's ID, say) goes into its name.
// It fails, saying why, when there is no cgroup hierarchy this process
// may write or the controllers cannot be delegated.
func DelegateCgroup(root, label string) (*Delegated, error) {
	h, why := findCgroups(root)
	if why != "" {
		return nil, errors.New(why)
	}
	me, err := procowner.Self()
	if err != nil {
		return nil, err
	}
	name := jobPrefix + me.String() + "-" + cleanLabel(label) + "-" + randomID()
	d := &Delegated{Version: "v1", dirs: map[string]string{}}
	if h.v2 {
		d.Version = "v2"
		base := h.bases[""]
		b, err := os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
		if err != nil {
			return nil, fmt.Errorf("cgroup v2 at %s: %w", base, err)
		}
		have := strings.Fields(string(b))
		for _, c := range delegatedControllers {
			if !slices.Contains(have, c) {
				return nil, fmt.Errorf("cgroup v2 controller %s is not enabled in %s/cgroup.subtree_control (enabled: %q)", c, base, have)
			}
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		d.dirs[""] = dir
		if err := os.Mkdir(filepath.Join(dir, "plugin"), 0o755); err != nil {
			d.Remove()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		enable := "+" + strings.Join(delegatedControllers, " +")
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(enable), 0); len(delegatedControllers) > 0 && err != nil {
			d.Remove()
			return nil, fmt.Errorf("enable controllers in %s: %w", dir, err)
		}
		return d, nil
	}
	for _, c := range delegatedControllers {
		if !h.own[c] {
			d.Remove()
			return nil, fmt.Errorf("cgroup v1 controller %s: this process's own cgroup is not visible", c)
		}
		dir := filepath.Join(h.bases[c], name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			d.Remove()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		d.dirs[c] = dir
	}
	return d, nil
}

func cleanLabel(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// Binds are the binds that show the delegated cgroup inside a sandbox.
func (d *Delegated) Binds() []Bind {
	if d.Version == "v2" {
		return []Bind{{Src: d.dirs[""], Dst: "/sys/fs/cgroup"}}
	}
	var bs []Bind
	for _, c := range delegatedControllers {
		bs = append(bs, Bind{Src: d.dirs[c], Dst: "/sys/fs/cgroup/" + c})
	}
	return bs
}

// Apply adds the delegated cgroup to the sandbox m: its binds and, in
// v2, the host's cgroup namespace (with the nsdelegate mount option the
// kernel lets a process move others only within its cgroup namespace,
// and the plugin's would be its leaf, not the job cgroup its steps go
// in).
func (d *Delegated) Apply(m *Mounts) {
	m.Binds = append(m.Binds, d.Binds()...)
	if d.Version == "v2" {
		m.ShareCgroupNS = true
	}
}

// LeafFD opens, in v2, the cgroup the plugin process starts in (for
// SysProcAttr.CgroupFD); nil in v1. The caller closes it once the
// process started.
func (d *Delegated) LeafFD() (*os.File, error) {
	if d.Version != "v2" {
		return nil, nil
	}
	return os.Open(filepath.Join(d.dirs[""], "plugin"))
}

// Dirs are the job cgroup's directories on the host, one per controller
// in v1.
func (d *Delegated) Dirs() []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(d.dirs)) {
		out = append(out, d.dirs[c])
	}
	return out
}

// Remove kills whatever still runs in the delegated cgroup and removes it
// with every cgroup the plugin made below it. It is safe to call more
// than once.
func (d *Delegated) Remove() error {
	var errs []error
	for _, dir := range d.Dirs() {
		errs = append(errs, removeTree(dir, d.Version == "v2"))
	}
	return errors.Join(errs...)
}

// removeTree kills the processes of the cgroup dir and its descendants
// and removes them, deepest first.
func removeTree(dir string, v2 bool) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return nil
		}
		if e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if v2 && len(dirs) > 0 && os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
		for _, d := range dirs {
			waitEmpty(filepath.Join(d, "cgroup.procs"))
		}
	} else {
		for _, d := range dirs {
			killAll(filepath.Join(d, "cgroup.procs"))
		}
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		errs = append(errs, rmdirWithin(dirs[i], 2*time.Second))
	}
	return errors.Join(errs...)
}
