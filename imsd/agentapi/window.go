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

// windowsRefresh is how long a stream trusts the vendor's windows it
// read: an app push that changes them takes effect within it.
const windowsRefresh = time.Minute

// windows is what a stream knows of its install's maintenance windows.
type windows struct {
	vendor, customer       *window.Schedule
	vendorAt, customerAt   time.Time // when read; zero: read again
	vendorErr, customerErr error
	// holding is set while the last claim passed over window-bound jobs
	// (the windows were closed).
	holding bool
}

// holdWindowBound says whether a claim at now must pass over window-bound
// jobs: while the vendor's or the customer's windows are closed, or
// cannot be read. c.mu is held.
func (c *conn) holdWindowBound(ctx context.Context, now time.Time) bool {
	w := &c.win
	if w.vendorAt.IsZero() || now.Sub(w.vendorAt) > windowsRefresh || now.Before(w.vendorAt) {
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
