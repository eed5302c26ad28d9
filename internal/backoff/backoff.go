// Package backoff computes retry delays: exponential growth between a
// minimum and a maximum, with full jitter (each delay drawn uniformly from
// zero to the current bound), so that many clients failing together (a
// fleet of agents after an imsd restart, consoles after a network blip)
// spread their retries instead of retrying in step.
//
// One Backoff belongs to one retry loop; it is not safe for concurrent use.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the retry state of one loop. The zero value is not usable:
// set Min and Max.
type Backoff struct {
	// Min is the first bound; each Next doubles the bound up to Max.
	Min, Max time.Duration
	// Rand returns a uniform value in [0, n]; nil means math/rand/v2.
	// Tests set it to make delays exact.
	Rand func(n time.Duration) time.Duration

	bound time.Duration
}

// New returns a Backoff from min to max.
func New(min, max time.Duration) *Backoff { return &Backoff{Min: min, Max: max} }

// Next returns the delay before the next retry, drawn uniformly from
// [0, bound] (full jitter), and doubles the bound (up to Max).
func (b *Backoff) Next() time.Duration {
	if b.bound < b.Min {
		b.bound = b.Min
	}
	bound := min(b.bound, b.Max)
	if b.bound < b.Max {
		b.bound = min(2*b.bound, b.Max)
	}
	if b.Rand != nil {
		return b.Rand(bound)
	}
	return rand.N(bound + 1)
}

// Reset starts again from Min, as after a success.
func (b *Backoff) Reset() { b.bound = 0 }

// Wait sleeps for d, or until ctx ends, and reports whether the whole
// delay passed. It stops its timer either way.
func Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
