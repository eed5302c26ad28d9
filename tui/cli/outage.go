package cli

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/internal/backoff"
)

// How a follow (byoc job logs --follow, --wait on a workflow) rides out
// a server that stops answering: the replica it talked to died, or lost
// its database. It tries again through the context's URL (a balancer
// sends it to a survivor) with jittered backoff from followRetryMin up
// to 5s, for as long as the failures have lasted less than
// followRetryFor, then gives up with the last error. Variables for
// tests.
var (
	followRetryMin = 250 * time.Millisecond
	followRetryFor = time.Minute
)

// outage is the failures in a row of one follow.
type outage struct {
	now   func() time.Time
	since time.Time // the first failure in a row (zero: none)
	retry *backoff.Backoff
}

func newOutage(now func() time.Time) *outage {
	return &outage{now: now, retry: backoff.New(followRetryMin, 5*time.Second)}
}

// failed records a failed call and returns how long to wait before the
// next, and whether to try again at all: only for errors a retry may
// cure (retryable, transient), within followRetryFor of the first.
func (o *outage) failed(ctx context.Context, err error) (time.Duration, bool) {
	if !retryable(err) && !transient(ctx, err) {
		return 0, false
	}
	now := o.now()
	if o.since.IsZero() {
		o.since = now
	}
	if now.Sub(o.since) >= followRetryFor {
		return 0, false
	}
	return o.retry.Next(), true
}

// ok records a call that worked: the next failure starts a new outage.
func (o *outage) ok() {
	o.since = time.Time{}
	o.retry.Reset()
}
