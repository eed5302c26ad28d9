package agentapi

import (
	"sync"
	"sync/atomic"
	"time"
)

// Admission control of hellos. A hello costs imsd about half a
// millisecond of CPU (the channel handshake, the signature, the agent's
// row, the welcome); after a restart every agent of the fleet says hello
// within seconds. Served all at once, they would wait on each other past
// their timeouts and be tried again, work thrown away. So imsd serves at
// most MaxHellos at once and ends any stream beyond that at once, before
// the handshake (cheap), with resource_exhausted and a retry hint
// (agentproto.RetryAfterHeader) the agent honours.
//
// The hint is the time imsd expects to need for the demand it just saw:
// the hellos it shed in the last second (each an agent that will come
// back) and those it is serving, over the rate at which it can serve
// hellos, between minRetryHint and maxRetryHint. That rate is the larger
// of what it served in the second before and what its slots serve at the
// hellos' recent duration (MaxHellos ÷ the moving average of a hello's
// time): the first counts what it did, the second what it could do when
// fewer agents came than it could take. Agents wait a random time up to
// the hint, so they come back spread over the time imsd needs for them.

// DefaultMaxHellos is the default bound on hellos served at once: high
// enough not to idle imsd in an ordinary storm (10,000 agents on two
// cores came back in 63 s unbounded, 132 s bounded at 256, on a loaded
// machine where a hello's time is mostly the agents'; docs/performance-connections.md),
// a bound against the storm that would make hellos time out.
const DefaultMaxHellos = 1024

const (
	minRetryHint = 500 * time.Millisecond
	// maxRetryHint is low: a shed costs imsd little (no handshake), an
	// agent waiting longer than needed costs the fleet time, and the
	// hello's measured duration includes the agents' own part of it.
	maxRetryHint = 10 * time.Second
	// minHelloRate is the served rate assumed before one was measured,
	// per second.
	minHelloRate = 100
)

type admission struct {
	slots chan struct{}
	shed  atomic.Uint64 // in all, for the metric

	mu sync.Mutex
	// window is the start of the current one-second window; served and
	// shedW count it; rate is the previous window's served count.
	window        time.Time
	served, shedW int
	rate          int
	// took is the moving average of a served hello's time (0: none yet).
	took time.Duration
}

func newAdmission(max int) *admission {
	if max <= 0 {
		max = DefaultMaxHellos
	}
	return &admission{slots: make(chan struct{}, max)}
}

// enter takes a hello slot, or reports none is free and how long the
// agent should wait.
func (a *admission) enter(now time.Time) (ok bool, retry time.Duration) {
	select {
	case a.slots <- struct{}{}:
		return true, 0
	default:
	}
	a.shed.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.roll(now)
	a.shedW++
	rate := float64(max(a.rate, minHelloRate))
	if a.took > 0 {
		rate = max(rate, float64(cap(a.slots))/a.took.Seconds())
	}
	demand := a.shedW + len(a.slots)
	retry = time.Duration(float64(demand) / rate * float64(time.Second))
	return false, min(max(retry, minRetryHint), maxRetryHint)
}

// leave gives the slot taken at start back; served says the hello got as
// far as the welcome.
func (a *admission) leave(start, now time.Time, served bool) {
	<-a.slots
	if !served {
		return
	}
	a.mu.Lock()
	a.roll(now)
	a.served++
	if d := now.Sub(start); a.took == 0 {
		a.took = d
	} else {
		a.took += (d - a.took) / 16
	}
	a.mu.Unlock()
}

// roll starts a new window when the current one is over. Called with mu.
func (a *admission) roll(now time.Time) {
	switch d := now.Sub(a.window); {
	case d < time.Second:
		return
	case d < 2*time.Second:
		a.rate = a.served
	default:
		a.rate = 0 // a quiet second between: nothing measured
	}
	a.window, a.served, a.shedW = now, 0, 0
}

// Shed reports how many streams admission control has shed.
func (s *Service) Shed() uint64 { return s.admit.shed.Load() }
