package pluginhost

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The lease file follows the agent's lease: written before the plugin
// starts, rewritten (whole) when a renewal moves the lease's end, left
// alone once the keeper ends.
func TestLeaseFileFollowsTheLease(t *testing.T) {
	dir := t.TempDir()
	var left atomic.Int64
	left.Store(int64(30 * time.Second))
	k, err := startLease(dir, func() time.Duration { return time.Duration(left.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	read := func() time.Time {
		b, err := os.ReadFile(filepath.Join(dir, leaseFile))
		if err != nil {
			t.Fatal(err)
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("lease file %q: %v", b, err)
		}
		return time.UnixMilli(ms)
	}
	if d := time.Until(read()); d < 29*time.Second || d > 30*time.Second {
		t.Fatalf("lease file says the lease ends in %s; want 30s", d)
	}
	left.Store(int64(-time.Second)) // ran out
	deadline := time.Now().Add(5 * time.Second)
	for time.Until(read()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lease file was not brought up to date")
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.end()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("the directory holds %d files; want the lease file only", len(ents))
	}
}

// The proxy's gate (live) refuses only a lease that still ran out when
// the agent is asked again: an agent that ran again after a freeze may
// find imsd's confirmation of a renewal in its socket, and a request of
// a job whose lease never ran out must not fail for it (the fault
// harness's seed 2: a freeze of 1.9 s after an imsd restart, a beat
// refused, the job recorded as succeeded without its end).
func TestLiveAsksAgainBeforeRefusing(t *testing.T) {
	var left atomic.Int64
	left.Store(int64(-time.Second))
	k, err := startLease(t.TempDir(), func() time.Duration { return time.Duration(left.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	defer k.end()
	// The renewal is read 100 ms after the gate is asked.
	go func() {
		time.Sleep(100 * time.Millisecond)
		left.Store(int64(30 * time.Second))
	}()
	if err := k.live(); err != nil {
		t.Fatalf("live refused a lease renewed while it asked: %v", err)
	}
	if err := k.live(); err != nil {
		t.Fatalf("live, once renewed: %v", err)
	}

	left.Store(int64(-time.Millisecond))
	time.Sleep(2 * leaseEvery) // the keeper reads it
	start := time.Now()
	err = k.live()
	if err == nil || !strings.Contains(err.Error(), "lease on the job ran out") {
		t.Fatalf("live on a lease that ran out: %v", err)
	}
	if d := time.Since(start); d < liveRecheck {
		t.Errorf("live refused after %s, before asking again for %s", d, liveRecheck)
	}
}
