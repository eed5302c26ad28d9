// Package procowner names things a process leaves on the machine (socket
// directories, cgroups) after the process that made them, so that a later
// sweep can tell leftovers of a dead process from things still in use.
//
// A Tag is a process id and the process's start time (in clock ticks
// since boot, from /proc/PID/stat): a pid alone may be reused by an
// unrelated process after its owner died, the pair is not (until a
// reboot, which empties /tmp and the cgroup file systems anyway).
//
// The package relies on Linux's /proc.
package procowner

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Tag identifies one run of one process.
type Tag struct {
	PID   int
	Start uint64
}

// String is the tag as it goes in a name: "PID.START".
func (t Tag) String() string { return fmt.Sprintf("%d.%d", t.PID, t.Start) }

// Self returns this process's tag.
func Self() (Tag, error) {
	pid := os.Getpid()
	start, ok := startTime(pid)
	if !ok {
		return Tag{}, fmt.Errorf("read /proc/%d/stat: no start time", pid)
	}
	return Tag{PID: pid, Start: start}, nil
}

// Parse reads the tag at the start of s, "PID.START-rest", and returns
// it with rest. ok is false when s does not start with a tag and a '-'.
func Parse(s string) (t Tag, rest string, ok bool) {
	head, rest, ok := strings.Cut(s, "-")
	if !ok {
		return Tag{}, "", false
	}
	p, st, ok := strings.Cut(head, ".")
	if !ok {
		return Tag{}, "", false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return Tag{}, "", false
	}
	start, err := strconv.ParseUint(st, 10, 64)
	if err != nil {
		return Tag{}, "", false
	}
	return Tag{PID: pid, Start: start}, rest, true
}

// Alive reports whether the process t names still runs: a process with
// its pid exists, started at its start time, and is not a zombie.
func (t Tag) Alive() bool {
	st, ok := ReadStat(t.PID)
	return ok && st.Start == t.Start && st.State != 'Z' && st.State != 'X'
}

func startTime(pid int) (uint64, bool) {
	st, ok := ReadStat(pid)
	return st.Start, ok
}

// Stat is what the package reads of /proc/PID/stat.
type Stat struct {
	// State is the process state: 'R', 'S', 'Z' (zombie), ...
	State byte
	// PGID is the process group, SID the session.
	PGID, SID int
	// Start is the start time in clock ticks after boot.
	Start uint64
}

// ReadStat reads a process's state, process group, session and start time from
// /proc/PID/stat; ok is false when there is no such process.
func ReadStat(pid int) (st Stat, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	// The command name is in parentheses and may hold anything: the
	// fields after the last ')' are state (field 3) onwards; pgrp is
	// field 5, session field 6 and starttime field 22.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	pg, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return Stat{}, false
	}
	sid, err := strconv.Atoi(string(f[3]))
	if err != nil {
		return Stat{}, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PGID: pg, SID: sid, Start: start}, true
}
