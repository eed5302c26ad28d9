// Package gomemlimit sets the Go runtime's soft memory limit of a server
// from its --memory-limit flag: a size, off, or auto, where auto takes
// 90 % of the memory limit of the cgroup the process runs in (a
// container's, a systemd unit's MemoryMax) and leaves a GOMEMLIMIT given
// in the environment alone. With a limit, the garbage collector works
// harder as the heap nears it instead of letting the heap grow to twice
// its live size past what the container may use, which would get the
// process killed (the kernel's OOM killer) in a burst such as a
// reconnect storm. The cgroup is read by github.com/KimMachineGun/automemlimit.
package gomemlimit

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Ratio is the share of the cgroup's limit that auto sets: the rest is
// for what the Go runtime does not count (stacks of threads in C, the
// binary's pages, other processes in the cgroup).
const Ratio = 0.9

// Setting is a parsed --memory-limit.
type Setting struct {
	Auto  bool  // 90 % of the cgroup's limit, if any; GOMEMLIMIT wins
	Off   bool  // no limit, whatever the environment says
	Bytes int64 // this many bytes (neither Auto nor Off)
}

// Parse reads a --memory-limit value: auto, off, or a size as GOMEMLIMIT
// takes it (a whole number of bytes, or with B, KiB, MiB, GiB or TiB).
func Parse(s string) (Setting, error) {
	switch s {
	case "auto", "":
		return Setting{Auto: true}, nil
	case "off":
		return Setting{Off: true}, nil
	}
	n, err := ParseSize(s)
	if err != nil {
		return Setting{}, fmt.Errorf("--memory-limit: %w", err)
	}
	return Setting{Bytes: n}, nil
}

var units = []struct {
	suffix string
	mult   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// ParseSize reads a size as the Go runtime reads GOMEMLIMIT.
func ParseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 63)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q is not a size: want auto, off, or a whole number with B, KiB, MiB, GiB or TiB (as GOMEMLIMIT), e.g. 2GiB", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("%q: a limit of nothing; use off for no limit", s)
	}
	if n > uint64(math.MaxInt64/mult) {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n) * mult, nil
}

// Env is what Apply reads of the process: its environment and its
// cgroup's memory limit (an error wrapping memlimit.ErrNoLimit, or
// memlimit.ErrNoCgroup, when there is none).
type Env struct {
	Getenv func(string) string
	Cgroup func() (uint64, error)
}

// System is the running process's.
func System(getenv func(string) string) Env {
	return Env{Getenv: getenv, Cgroup: memlimit.FromCgroup}
}

// Applied is what Apply did, to be logged at start.
type Applied struct {
	Limit  int64  // bytes; math.MaxInt64 for none
	Source string // "flag", "GOMEMLIMIT", "cgroup", "off" or "none"
	Cgroup uint64 // the cgroup's limit, when one was read
	Note   string // a warning worth logging, if any
}

func (a Applied) String() string {
	switch a.Source {
	case "cgroup":
		return fmt.Sprintf("%s (90%% of the cgroup's %s)", Size(a.Limit), Size(int64(a.Cgroup)))
	case "GOMEMLIMIT":
		return Size(a.Limit) + " (GOMEMLIMIT)"
	case "flag":
		return Size(a.Limit) + " (--memory-limit)"
	case "off":
		return "none (--memory-limit off)"
	}
	return "none (no cgroup memory limit, no GOMEMLIMIT)"
}

// Apply sets the runtime's soft memory limit per s (set, the runtime's
// setter: debug.SetMemoryLimit outside tests) and says what it did.
func Apply(s Setting, env Env, set func(int64) int64) Applied {
	cg, cgErr := env.Cgroup()
	if cgErr != nil {
		// No cgroup, or no limit on it, is the usual case outside a
		// container. Any other error is not worth refusing to start
		// over (the limit is a safeguard): it is said in the log.
		cg = 0
		if errors.Is(cgErr, memlimit.ErrNoLimit) || errors.Is(cgErr, memlimit.ErrNoCgroup) || errors.Is(cgErr, memlimit.ErrCgroupsNotSupported) {
			cgErr = nil
		}
	}
	switch {
	case s.Off:
		set(math.MaxInt64)
		return Applied{Limit: math.MaxInt64, Source: "off"}
	case !s.Auto:
		set(s.Bytes)
		a := Applied{Limit: s.Bytes, Source: "flag", Cgroup: cg}
		if cg > 0 && uint64(s.Bytes) > cg {
			a.Note = fmt.Sprintf("--memory-limit %s is above the cgroup's limit of %s: the process can be killed before the collector holds it back", Size(s.Bytes), Size(int64(cg)))
		}
		return a
	}
	if v := env.Getenv("GOMEMLIMIT"); v != "" {
		// The runtime read it at start; report what it took.
		return Applied{Limit: set(-1), Source: "GOMEMLIMIT", Cgroup: cg}
	}
	if cg == 0 || cg >= math.MaxInt64 {
		a := Applied{Limit: set(-1), Source: "none"}
		if cgErr != nil {
			a.Note = "reading the cgroup's memory limit: " + cgErr.Error()
		}
		return a
	}
	limit := int64(float64(cg) * Ratio)
	set(limit)
	return Applied{Limit: limit, Source: "cgroup", Cgroup: cg}
}

// ApplySystem is Apply for the running process.
func ApplySystem(s Setting, getenv func(string) string) Applied {
	return Apply(s, System(getenv), debug.SetMemoryLimit)
}

// Size formats bytes as the flag takes them back where whole (2GiB),
// else with one decimal (1.8GiB).
func Size(n int64) string {
	for _, u := range units {
		if n >= u.mult && u.mult > 1 {
			if n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.suffix
			}
			return strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
