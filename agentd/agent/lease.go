package agent

import (
	"context"
	"time"
)

// The agent's own lease on each job.
//
// imsd renews a job's lease for a full lease duration L from the moment
// it reads a renewal (the hello that re-attaches the job, the job's ack, a
// heartbeat naming it), and hands the job out again only after the lease
// has run out and a grace period on top has passed (imsd's --lease-grace).
// The agent counts L from the moment it *sent* the last renewal that imsd
// confirmed, which is no later than when imsd read it, and stops the job
// itself when L has passed without another: so the agent's deadline falls
// before imsd's, and the grace covers a clock running slower on the agent
// than on imsd and the time the plugin takes to die. A job therefore never
// runs on two agents at once, whatever the network or imsd does.
//
// This is the rule of a full lease, not GitHub's runner's abort on the
// first failed renewal: a renewal lost to one dropped packet or a slow
// database costs nothing while a later one gets through, and safety comes
// from the deadlines' order, not from how quickly the agent gives up.
//
// Time is read from the monotonic clock and from the wall clock, and the
// larger of the two elapsed times counts: the monotonic clock stops while
// the machine is suspended, the wall clock may be stepped back; neither
// alone can make the agent keep a job longer than L.

// elapsed is how long ago t was, on whichever clock says longer.
func (a *Agent) elapsedSince(t time.Time) time.Duration {
	now := a.now()
	d := now.Sub(t) // monotonic when both have a reading
	if w := now.Round(0).Sub(t.Round(0)); w > d {
		d = w
	}
	return d
}

// expired reports whether the agent's own lease on j has run out.
func (a *Agent) expiredLocked(j *jobRun) bool {
	return a.elapsedSince(j.leaseUntil) > 0
}

// renewLocked extends j's lease to a full lease after sentAt, the time a
// renewal that imsd confirmed was sent. a.mu is held.
func (a *Agent) renewLocked(j *jobRun, sentAt time.Time) {
	until := sentAt.Add(a.leaseLocked())
	if until.After(j.leaseUntil) {
		j.leaseUntil = until
	}
}

// leaseLocked is the lease duration imsd last announced (its welcome), or
// the default before the first.
func (a *Agent) leaseLocked() time.Duration {
	if a.lease > 0 {
		return a.lease
	}
	return defaultLease
}

// defaultLease bounds a job's wait to start before any welcome said
// otherwise; imsd's default lease.
const defaultLease = 30 * time.Second

// watchLeases stops every job whose lease ran out, until ctx ends. It
// checks a few times per second, or at a twentieth of the lease if that
// is shorter; imsd's grace covers the check interval.
func (a *Agent) watchLeases(ctx context.Context) {
	for {
		a.mu.Lock()
		every := min(a.leaseLocked()/20, 250*time.Millisecond)
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(every, 10*time.Millisecond)):
		}
		a.checkLeases()
	}
}

// checkLeases stops the jobs whose lease ran out. A job that already
// finished keeps its result: nothing runs any more, and imsd accepts the
// result if it did not hand the job out again.
func (a *Agent) checkLeases() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range a.jobs {
		if j.result != nil || !a.expiredLocked(j) {
			continue
		}
		why := "imsd confirmed no lease renewal for " + a.leaseLocked().String() + "; stopped so that it never runs beside another attempt"
		if !j.started {
			why = "imsd did not confirm the assignment within " + a.leaseLocked().String()
		}
		a.stopLocked(j, why)
	}
}

// deadAfter is how long a heartbeat that named jobs may go unanswered
// before the agent takes the stream for dead and reconnects: two
// heartbeats, or a third of the lease if that is longer, so that a slow
// database does not cost a reconnect, and a dead stream is left with most
// of the lease still to run.
func (a *Agent) deadAfter() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(2*a.heartbeat, a.leaseLocked()/3)
}
