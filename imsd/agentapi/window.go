package agentapi

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/internal/window"
)

// Maintenance windows. A window-bound job (one of a release) is handed out
// only while the install's windows are open: the vendor's (the install's
// settings, from installs/NAME.toml) and the customer's (as the agent
// reported them in its hello or a heartbeat). Until then claims pass over
// it (store.ClaimJobsHolding) and it stays queued in its place; the first
// heartbeat after the windows open claims it. The agent checks the
// customer's window again by its own clock and refuses the job outside it.

// A stream reads the vendor's windows (the install) again at most every
// windowsRefresh, and only once the hub said the fleet changed (an app
// push that changes an install says so), or at the latest after
// windowsMaxAge (a change made through another replica): an idle agent
// costs one read of its install every windowsMaxAge, and only while it
// claims.
const (
	windowsRefresh = time.Minute
	windowsMaxAge  = 10 * time.Minute
)

// windows is what a stream knows of its install's maintenance windows.
type windows struct {
	vendor, customer       *window.Schedule
	vendorAt, customerAt   time.Time // when read; zero: read again
	vendorErr, customerErr error
	// fleet is the hub's fleet signal as it was when the vendor's
	// windows were read: closed once something changed since.
	fleet <-chan struct{}
	// holding is set while the last claim passed over window-bound jobs
	// (the windows were closed).
	holding bool
}

// holdWindowBound says whether a claim at now must pass over window-bound
// jobs: while the vendor's or the customer's windows are closed, or
// cannot be read. c.mu is held.
func (c *conn) holdWindowBound(ctx context.Context, now time.Time) bool {
	w := &c.win
	if age := now.Sub(w.vendorAt); w.vendorAt.IsZero() || age < 0 || age > windowsMaxAge || (age > windowsRefresh && fired(w.fleet)) {
		w.fleet = c.svc.hub.FleetSignal()
		in, err := c.svc.store.GetInstall(ctx, c.agent.InstallID)
		if err == nil {
			w.vendor, w.vendorErr = window.ParseSchedule(in.Settings.Windows)
			w.vendorAt = now
		} else {
			w.vendor, w.vendorErr = nil, err
		}
	}
	if w.customerAt.IsZero() {
		var texts []string
		if c.perms != nil {
			texts = c.perms.Windows
		}
		w.customer, w.customerErr = window.ParseSchedule(texts)
		w.customerAt = now
	}
	switch {
	case w.vendorErr != nil:
		c.logger().WarnContext(ctx, "holding window-bound jobs: the install's maintenance windows cannot be read", "err", w.vendorErr)
		w.holding = true
	case w.customerErr != nil:
		c.logger().WarnContext(ctx, "holding window-bound jobs: the customer's maintenance windows cannot be read", "err", w.customerErr)
		w.holding = true
	default:
		w.holding = !w.vendor.Contains(now) || !w.customer.Contains(now)
	}
	return w.holding
}

// fired says whether signal ch was closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
