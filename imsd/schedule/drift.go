package schedule

import (
	"context"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/cron"
)

// DriftPass queues, for every component with a drift_schedule that an
// active install runs, a drift check for the latest tick that is due and
// not yet recorded, as Pass does for actions: exactly once across
// replicas and restarts (store.FireDrift), missed ticks not replayed, a
// tick skipped while the previous check has not ended. Ticks count from
// the component's deploy. It returns the ids of the jobs it queued.
func (s *Scheduler) DriftPass(ctx context.Context) ([]string, error) {
	last, err := s.st.LastDriftTicks(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var queued []string
	err = s.eachActiveApp(ctx, "drift checks", func(in store.Install, app *config.App) error {
		scheduled := driftScheduled(app)
		if len(scheduled) == 0 {
			return nil
		}
		deployed, err := s.st.InstallComponents(ctx, in.ID)
		if err != nil {
			return err
		}
		for _, ic := range deployed {
			c := scheduled[ic.Name]
			if c == nil {
				continue
			}
			sc, err := cron.Parse(c.DriftSchedule)
			if err != nil {
				s.log.Error("drift checks: schedule", "install", in.Name, "component", c.Name, "schedule", c.DriftSchedule, "err", err)
				continue
			}
			base := last[in.ID][ic.Name]
			if base.IsZero() {
				base = ic.DeployedAt
			}
			due := lastDue(sc, base, now)
			if due.IsZero() {
				continue
			}
			j, err := s.eng.DriftJob(ctx, in, app, c, ic, now)
			if err != nil {
				s.log.Error("drift checks: build job", "install", in.Name, "component", ic.Name, "err", err)
				continue
			}
			res, err := s.st.FireDrift(ctx, store.DriftTick{InstallID: in.ID, Component: ic.Name, At: due}, j, now)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.log.Error("drift checks: fire", "install", in.Name, "component", ic.Name, "tick", due, "err", err)
				continue
			}
			switch res {
			case store.TickFired:
				queued = append(queued, j.ID)
				s.eng.WakeInstall(in.ID)
				s.log.Info("drift check queued", "install", in.Name, "component", ic.Name, "tick", due, "job", j.ID)
			case store.TickSkipped:
				s.log.Warn("drift tick skipped: the previous check has not ended", "install", in.Name, "component", ic.Name, "tick", due)
			}
		}
		return nil
	})
	return queued, err
}

// driftScheduled maps the components of app (and its sandbox) that have a
// drift schedule by name.
func driftScheduled(app *config.App) map[string]*config.Component {
	out := map[string]*config.Component{}
	for _, c := range app.Components {
		if c.DriftSchedule != "" {
			out[c.Name] = c
		}
	}
	if app.Sandbox != nil && app.Sandbox.DriftSchedule != "" {
		out[app.Sandbox.Name] = app.Sandbox
	}
	return out
}
