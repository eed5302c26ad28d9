package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// leaseFile is the file in a plugin's socket directory (which its
// sandbox shows) where the agent keeps the end of its lease on the job
// (StartOptions.Lease, sdk.HostLeaseEnv).
const leaseFile = "lease"

// leaseEvery is how often the agent brings the lease file up to date; a
// renewal moves the lease's end by a heartbeat or more.
const leaseEvery = 100 * time.Millisecond

// leaseJitter is how far a deadline may move before it is written again.
const leaseJitter = 10 // milliseconds

// leaseKeeper keeps a plugin's lease file.
type leaseKeeper struct {
	path string
	left func() time.Duration
	last int64
	// until is the lease's end as last read (with the monotonic
	// reading of the clock it was read on), for live.
	until atomic.Pointer[time.Time]
	stop  chan struct{}
	done  chan struct{}
}

// startLease writes the lease file in dir, as left says now, and keeps
// it up to date until stop. The deadline is written on the wall clock
// (Unix milliseconds); left follows the agent's own rule (the longer of
// the monotonic and the wall clock's elapsed time counts), so each write
// is at most as late as the agent's own deadline.
func startLease(dir string, left func() time.Duration) (*leaseKeeper, error) {
	k := &leaseKeeper{path: filepath.Join(dir, leaseFile), left: left, stop: make(chan struct{}), done: make(chan struct{})}
	if err := k.write(time.Now()); err != nil {
		return nil, fmt.Errorf("lease file: %w", err)
	}
	go k.keep()
	return k, nil
}

func (k *leaseKeeper) keep() {
	defer close(k.done)
	t := time.NewTicker(leaseEvery)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case now := <-t.C:
			// A failed write leaves the last lease in force, which only
			// ends the plugin's work early.
			_ = k.write(now)
		}
	}
}

// write replaces the file whole (a new file renamed over it), so that
// the plugin never reads half a number; nothing the plugin put in the
// directory is followed or written through.
func (k *leaseKeeper) write(now time.Time) error {
	until := now.Add(k.left())
	k.until.Store(&until)
	ms := until.Round(0).UnixMilli()
	if d := ms - k.last; d > -leaseJitter && d < leaseJitter {
		// The same deadline, give or take the clocks' reading.
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(k.path), ".lease-*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.FormatInt(ms, 10) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), k.path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	k.last = ms
	return nil
}

// liveRecheck is how long live asks the agent again before it refuses:
// an agent that was frozen may not yet have read a renewal that imsd
// confirmed meanwhile (it waits in the agent's socket), and refusing
// then would fail a job whose lease never ran out. Well inside the
// plugin's own sdk.HostLeaseSlack, and inside imsd's grace.
const liveRecheck = 500 * time.Millisecond

// live is the egress proxy's Live (egress.Proxy): an error once the
// lease has run out, on the monotonic or on the wall clock (the agent's
// own rule). The lease's end as last read (every leaseEvery) answers at
// once while it lies ahead; once it has passed, the agent is asked again
// for up to liveRecheck, and only a lease that still ran out refuses.
// An agent frozen past its lease finds it passed as soon as it runs
// again, before its own watchdog has stopped the plugin.
func (k *leaseKeeper) live() error {
	if u := k.until.Load(); within(time.Now(), *u) {
		return nil
	}
	give := time.Now().Add(liveRecheck)
	for {
		now := time.Now()
		until := now.Add(k.left())
		if within(now, until) {
			k.until.Store(&until)
			return nil
		}
		if now.After(give) {
			return fmt.Errorf("the agent's lease on the job ran out at %s", until.UTC().Format(time.RFC3339Nano))
		}
		time.Sleep(liveRecheck / 6)
	}
}

// within reports whether now lies before until on both clocks.
func within(now, until time.Time) bool {
	return now.Before(until) && now.Round(0).Before(until.Round(0))
}

// end stops keeping the file; safe on nil.
func (k *leaseKeeper) end() {
	if k == nil {
		return
	}
	close(k.stop)
	<-k.done
}
