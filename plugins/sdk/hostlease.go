package sdk

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"
)

// HostLeaseEnv names a file in which the host (agentd) keeps the end of
// its lease on the job the plugin works for, as decimal Unix
// milliseconds, renewed as imsd renews the lease. A plugin served with it
// (Serve) cancels its operations in flight with ErrHostLeaseLost once
// that moment has passed (and HostLeaseSlack), however long the host has
// been silent before:
// an agent frozen (SIGSTOP, a stalled VM) past its lease cannot stop the
// plugin itself, and imsd may then hand the job to another agent once the
// lease and its grace have passed. A frozen host is otherwise waited for:
// a freeze inside the lease costs nothing. Without the variable (an older
// host) the plugin stops when the host has not answered a gRPC keepalive
// for KeepaliveTime + KeepaliveTimeout instead.
const HostLeaseEnv = "BYOC_HOST_LEASE"

// ErrHostLeaseLost is the cause of an operation's context when the
// host's lease on the job ran out while the host did not stop the
// operation itself (it is frozen): another agent may soon run the job.
var ErrHostLeaseLost = errors.New("the agent's lease on the job ran out while the agent did not answer")

// HostLeaseSlack is how long after the lease's end the plugin stops its
// operations: an agent that is running stops the job itself at the end
// (it checks a few times a second), so its own reason is the one the job
// records, while a frozen agent's plugin still stops well inside imsd's
// grace (at least 4 s), earlier than the keepalive's worst case.
const HostLeaseSlack = time.Second

// hostLeasePoll is how often the plugin reads the lease file: the agent
// checks its own leases as often, and imsd's grace covers both.
const hostLeasePoll = 100 * time.Millisecond

// hostLease watches a HostLeaseEnv file.
type hostLease struct {
	path string
	lost chan struct{}
	stop chan struct{}
	once sync.Once

	// last is the file's content last read, deadline what it says, and
	// left how long it had to run when it was read, at readAt.
	last     []byte
	deadline time.Time
	left     time.Duration
	readAt   time.Time
}

// watchHostLease starts watching the lease file at path; nil when path
// is empty or holds no lease (the host then has no lease to tell).
func watchHostLease(path string) *hostLease {
	if path == "" {
		return nil
	}
	l := &hostLease{path: path, lost: make(chan struct{}), stop: make(chan struct{})}
	if !l.read(time.Now()) {
		return nil
	}
	go l.watch()
	return l
}

// read reads the file and reports whether it holds a lease; a file that
// cannot be read or parsed leaves the last lease read in force (the
// agent replaces it whole, by rename).
func (l *hostLease) read(now time.Time) bool {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return !l.readAt.IsZero()
	}
	b = bytes.TrimSpace(b)
	if l.last != nil && bytes.Equal(b, l.last) {
		return true
	}
	ms, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || ms <= 0 {
		return !l.readAt.IsZero()
	}
	l.last, l.deadline, l.readAt = b, time.UnixMilli(ms), now
	l.left = l.deadline.Sub(now.Round(0))
	return true
}

// expired reports whether the lease ran out HostLeaseSlack ago at now,
// on the wall clock or on the monotonic clock since it was read,
// whichever says so first (the agent's own rule: neither a clock stepped
// back nor a suspended machine keeps a job alive).
func (l *hostLease) expired(now time.Time) bool {
	return now.Round(0).After(l.deadline.Add(HostLeaseSlack)) || now.Sub(l.readAt) > l.left+HostLeaseSlack
}

func (l *hostLease) watch() {
	t := time.NewTicker(hostLeasePoll)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case now := <-t.C:
			l.read(now)
			if l.expired(now) {
				close(l.lost)
				return
			}
		}
	}
}

// Lost is closed once the lease has run out; nil for a nil lease.
func (l *hostLease) Lost() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.lost
}

// Stop ends the watch.
func (l *hostLease) Stop() {
	if l != nil {
		l.once.Do(func() { close(l.stop) })
	}
}
