// Package schedule fires the cron triggers of installs' actions: each
// cron-triggered action of each active install runs once per tick of its
// schedule, also across imsd restarts and with several replicas on one
// database.
//
// Exactly once comes from the store, not from this process: a tick is
// recorded together with the run it queues, in one transaction, and the
// store refuses a second record of the same tick (or of an older one).
// Every replica may evaluate every schedule; only one insert wins.
//
// Missed ticks (imsd down, or an install busy for longer than a period)
// are not replayed: a pass fires only the latest tick that is due, so
// after a restart an action runs at most once for everything it missed.
// A tick that comes while an earlier run of the same action is still
// queued or running is recorded as skipped, so runs never pile up behind
// a busy install.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/workflow"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/cron"
)

// maxLookback bounds how far back a pass looks for the latest due tick of
// an action with no tick recorded (or one recorded long ago): a year and a
// bit, so a yearly schedule still finds its tick.
const maxLookback = 400 * 24 * time.Hour

// Scheduler fires cron triggers. Its clock is its own (a test advances
// it), and so is its interval.
type Scheduler struct {
	st  *store.Store
	eng *workflow.Engine
	now func() time.Time
	log *slog.Logger
	// Interval is how often the schedules are evaluated. A tick fires up
	// to one interval after its time. Set before Run.
	Interval time.Duration
}

// New returns a scheduler queuing runs for eng to run.
func New(st *store.Store, eng *workflow.Engine, now func() time.Time, log *slog.Logger) *Scheduler {
	return &Scheduler{st: st, eng: eng, now: now, log: log, Interval: 10 * time.Second}
}

// Run evaluates the schedules at once and then every Interval until ctx
// ends.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("cron triggers", "err", err)
		}
		if _, err := s.DriftPass(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("drift checks", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass fires, for every cron-triggered action of every active install,
// the latest tick that is due and not yet recorded. It returns the ids of
// the runs it queued. An install whose revision cannot be read is logged
// and passed over.
func (s *Scheduler) Pass(ctx context.Context) ([]string, error) {
	last, err := s.st.LastTicks(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var fired []string
	err = s.eachActiveApp(ctx, "cron triggers", func(in store.Install, app *config.App) error {
		for _, a := range app.Actions {
			base := last[in.ID][a.Name]
			if base.IsZero() {
				// Nothing fired yet: ticks count from the install's creation.
				base = in.CreatedAt
			}
			due, spec := s.due(in, a, base, now)
			if due.IsZero() {
				continue
			}
			wf := workflow.NewActionRun(in, in.AppRevision, a, workflow.TriggerCron,
				fmt.Sprintf("action %s: cron %q, tick %s", a.Name, spec, due.Format(time.RFC3339)), "cron", now)
			res, err := s.st.FireTick(ctx, store.Tick{InstallID: in.ID, Action: a.Name, At: due}, wf, now)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.log.Error("cron triggers: fire", "install", in.Name, "action", a.Name, "tick", due, "err", err)
				continue
			}
			switch res {
			case store.TickFired:
				fired = append(fired, wf.ID)
				s.eng.Kick(wf.ID)
				s.log.Info("cron trigger fired", "install", in.Name, "action", a.Name, "tick", due, "workflow", wf.ID)
			case store.TickSkipped:
				s.log.Warn("cron tick skipped: the action's earlier run has not ended", "install", in.Name, "action", a.Name, "tick", due)
			}
		}
		return nil
	})
	return fired, err
}

// eachActiveApp calls fn with every active install and the app revision
// it runs, and stops at fn's first error. An install whose revision
// cannot be read is logged (under what, the pass's name) and passed over.
func (s *Scheduler) eachActiveApp(ctx context.Context, what string, fn func(store.Install, *config.App) error) error {
	ins, err := s.st.ListInstalls(ctx, "")
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.State != store.InstallActive || in.AppRevision == 0 {
			continue
		}
		app, err := s.eng.App(ctx, in.AppID, in.AppRevision)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Error(what+": read app revision", "install", in.Name, "revision", in.AppRevision, "err", err)
			continue
		}
		if err := fn(in, app); err != nil {
			return err
		}
	}
	return nil
}

// lastDue returns the latest tick of sc after base and not after now
// (zero when none), looking back at most maxLookback: missed ticks are
// not replayed.
func lastDue(sc cron.Schedule, base, now time.Time) time.Time {
	if now.Sub(base) > maxLookback {
		base = now.Add(-maxLookback)
	}
	var due time.Time
	for t := sc.Next(base); !t.IsZero() && !t.After(now); t = sc.Next(t) {
		due = t
	}
	return due
}

// due returns the latest tick of action a's cron schedules after base and
// not after now (zero when none), and the schedule it came from.
func (s *Scheduler) due(in store.Install, a *config.Action, base, now time.Time) (time.Time, string) {
	var due time.Time
	var from string
	for _, spec := range a.CronSchedules() {
		sc, err := cron.Parse(spec)
		if err != nil {
			// Pushes refuse bad schedules; a stored one that no longer
			// parses is said once per pass.
			s.log.Error("cron triggers: schedule", "install", in.Name, "action", a.Name, "schedule", spec, "err", err)
			continue
		}
		if t := lastDue(sc, base, now); t.After(due) {
			due, from = t, spec
		}
	}
	return due, from
}
