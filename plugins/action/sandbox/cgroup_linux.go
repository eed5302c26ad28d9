package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups creates one cgroup per command.
type cgroups interface {
	version() string
	create(Limits) (cgroup, error)
}

// cgroup is the cgroup (one per controller in v1) of one command.
type cgroup interface {
	// procsFiles are the cgroup.procs files the command joins.
	procsFiles() []string
	// kill kills every process in the cgroup and waits until it is empty.
	kill()
	oomKilled() bool
	remove()
}

const cpuPeriodMicros = 100000

// detectCgroups finds a writable cgroup hierarchy: v2 (unified) or v1
// with the memory, pids and cpu controllers. New cgroups go below the
// cgroup this process is in, so they nest inside whatever limits the
// agent itself runs under.
func detectCgroups(root string) (cgroups, string) {
	h, why := findCgroups(root)
	if why != "" {
		return nil, why
	}
	if h.v2 {
		base := h.bases[""]
		if err := probeDir(base); err != nil {
			return nil, fmt.Sprintf("cgroup v2 at %s is not writable: %v", base, err)
		}
		return &v2{base: base}, ""
	}
	for c, base := range h.bases {
		if err := probeDir(base); err != nil {
			return nil, fmt.Sprintf("cgroup v1 %s at %s is not writable: %v", c, base, err)
		}
	}
	return &v1{bases: h.bases}, ""
}

// hierarchy is where this process's step cgroups go.
type hierarchy struct {
	v2 bool
	// bases maps a controller ("" in v2) to the parent of step cgroups.
	bases map[string]string
	// own marks the bases that are this process's own cgroup, not a
	// controller's root taken because that was not visible.
	own map[string]bool
}

// findCgroups finds the cgroup hierarchy below root (/sys/fs/cgroup when
// empty) and this process's place in it, without checking it is writable.
func findCgroups(root string) (hierarchy, string) {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return hierarchy{}, fmt.Sprintf("read /proc/self/cgroup: %v", err)
	}
	own := parseProcCgroup(string(self))
	switch os.Getenv(CgroupEnv) {
	case "v2":
		// The agent delegated this plugin a cgroup, bound at root: steps
		// go right below it (the plugin itself is in its leaf).
		return hierarchy{v2: true, bases: map[string]string{"": root}, own: map[string]bool{}}, ""
	case "v1":
		h := hierarchy{bases: map[string]string{}, own: map[string]bool{}}
		for _, c := range delegatedControllers {
			h.bases[c] = filepath.Join(root, c)
		}
		return h, ""
	case "":
	default:
		return hierarchy{}, "the agent gave this plugin no cgroup for its steps (" + os.Getenv(CgroupEnv) + ")"
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return hierarchy{v2: true, bases: map[string]string{"": filepath.Join(root, own[""])}, own: map[string]bool{"": true}}, ""
	}
	h := hierarchy{bases: map[string]string{}, own: map[string]bool{}}
	for _, c := range []string{"memory", "pids", "cpu"} {
		mount := filepath.Join(root, c)
		if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
			return hierarchy{}, fmt.Sprintf("cgroup v1 controller %s is not mounted at %s", c, mount)
		}
		base := filepath.Join(mount, own[c])
		h.own[c] = true
		if _, err := os.Stat(base); err != nil {
			// This process's cgroup may not be visible in this mount
			// namespace; the controller's root is the next best parent.
			base, h.own[c] = mount, false
		}
		h.bases[c] = base
	}
	return h, ""
}

// parseProcCgroup maps controller names to this process's cgroup path;
// "" is the v2 path.
func parseProcCgroup(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

func probeDir(dir string) error {
	d := filepath.Join(dir, "byoc-probe-"+randomID())
	if err := os.Mkdir(d, 0o755); err != nil {
		return err
	}
	return os.Remove(d)
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// v1 is cgroup v1 with one hierarchy per controller.
type v1 struct{ bases map[string]string }

func (*v1) version() string { return "v1" }

func (c *v1) create(l Limits) (cgroup, error) {
	name, err := stepName()
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	g := &v1group{dirs: map[string]string{}}
	for ctrl, base := range c.bases {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		g.dirs[ctrl] = dir
	}
	var writes [][2]string
	if l.MemoryBytes > 0 {
		writes = append(writes, [2]string{filepath.Join(g.dirs["memory"], "memory.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)})
		// Without swap accounting the file is absent; the limit above still
		// holds for memory, swap is then simply not counted.
		if _, err := os.Stat(filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes")); err == nil {
			writes = append(writes, [2]string{filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)})
		}
	}
	if l.PIDs > 0 {
		writes = append(writes, [2]string{filepath.Join(g.dirs["pids"], "pids.max"), strconv.Itoa(l.PIDs)})
	}
	if l.CPUs > 0 {
		writes = append(writes,
			[2]string{filepath.Join(g.dirs["cpu"], "cpu.cfs_period_us"), strconv.Itoa(cpuPeriodMicros)},
			[2]string{filepath.Join(g.dirs["cpu"], "cpu.cfs_quota_us"), strconv.Itoa(int(l.CPUs * cpuPeriodMicros))})
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil {
			g.remove()
			return nil, fmt.Errorf("set cgroup limit %s: %w", filepath.Base(w[0]), err)
		}
	}
	return g, nil
}

type v1group struct{ dirs map[string]string }

func (g *v1group) procsFiles() []string {
	var fs []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if d, ok := g.dirs[c]; ok {
			fs = append(fs, filepath.Join(d, "cgroup.procs"))
		}
	}
	return fs
}

// kill uses the pids hierarchy, which every process of the command is in.
func (g *v1group) kill() { killAll(filepath.Join(g.dirs["pids"], "cgroup.procs")) }

func (g *v1group) oomKilled() bool {
	b, err := os.ReadFile(filepath.Join(g.dirs["memory"], "memory.oom_control"))
	if err != nil {
		return false
	}
	return oomCount(string(b), "oom_kill") > 0
}

func (g *v1group) remove() {
	for _, d := range g.dirs {
		rmdirRetry(d)
	}
}

// v2 is the unified cgroup hierarchy.
type v2 struct{ base string }

func (*v2) version() string { return "v2" }

func (c *v2) create(l Limits) (cgroup, error) {
	name, err := stepName()
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	dir := filepath.Join(c.base, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	g := &v2group{dir: dir}
	var writes [][2]string
	if l.MemoryBytes > 0 {
		writes = append(writes, [2]string{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)}, [2]string{"memory.swap.max", "0"})
	}
	if l.PIDs > 0 {
		writes = append(writes, [2]string{"pids.max", strconv.Itoa(l.PIDs)})
	}
	if l.CPUs > 0 {
		writes = append(writes, [2]string{"cpu.max", fmt.Sprintf("%d %d", int(l.CPUs*cpuPeriodMicros), cpuPeriodMicros)})
	}
	for _, w := range writes {
		err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0)
		if err != nil && !(w[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			g.remove()
			return nil, fmt.Errorf("set cgroup limit %s (is the controller enabled in %s/cgroup.subtree_control?): %w", w[0], c.base, err)
		}
	}
	return g, nil
}

type v2group struct{ dir string }

func (g *v2group) procsFiles() []string { return []string{filepath.Join(g.dir, "cgroup.procs")} }

func (g *v2group) kill() {
	// cgroup.kill (Linux 5.14+) kills the whole cgroup atomically.
	if os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0) == nil {
		waitEmpty(filepath.Join(g.dir, "cgroup.procs"))
		return
	}
	killAll(filepath.Join(g.dir, "cgroup.procs"))
}

func (g *v2group) oomKilled() bool {
	b, err := os.ReadFile(filepath.Join(g.dir, "memory.events"))
	if err != nil {
		return false
	}
	return oomCount(string(b), "oom_kill") > 0
}

func (g *v2group) remove() { rmdirRetry(g.dir) }

// killAll SIGKILLs the processes listed in procs until none is left.
func killAll(procs string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pids := readPIDs(procs)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitEmpty(procs string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(readPIDs(procs)) > 0 {
		time.Sleep(2 * time.Millisecond)
	}
}

func readPIDs(procs string) []int {
	b, err := os.ReadFile(procs)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func oomCount(s, key string) int {
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// rmdirRetry removes a cgroup; the kernel refuses while the last process
// is still being torn down.
func rmdirRetry(dir string) { _ = rmdirWithin(dir, 2*time.Second) }
