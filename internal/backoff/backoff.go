// Package backoff computes the waits between retries: exponential, with
// equal jitter (half the step fixed, half random), so that clients that
// failed together do not retry together.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out the waits of one series of retries. The zero value is
// not usable: set Min and Max.
type Backoff struct {
	// Min is the first step and Max the largest.
	Min, Max time.Duration
	step     time.Duration
}

// Next returns the wait before the next try: half the current step plus a
// random part of the other half. The step then doubles, up to Max.
func (b *Backoff) Next() time.Duration {
	if b.step < b.Min {
		b.step = b.Min
	}
	d := b.step/2 + rand.N(b.step/2+1)
	b.step = min(2*b.step, b.Max)
	return d
}

// Reset starts the series again from Min.
func (b *Backoff) Reset() { b.step = 0 }

// Sleep waits d, or less if ctx ends first; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
