// Package health decides each agent's health (healthy, degraded or
// offline) from what the store holds, records every change once however
// many imsd replicas sweep (the store's writes are conditional on what was
// read), decides alerts (after a delay, de-duplicated, none before an
// agent's first heartbeat), delivers them from the store's outbox to the
// configured sinks (a signed webhook, a Slack-compatible webhook) with
// retries, and exports byoc_agent_up and byoc_agent_health_state.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/byoc-dev/byoc/imsd/store"
)

// Config is how health is decided and alerts are sent.
type Config struct {
	// OfflineAfter: an agent not heard for this long is offline.
	OfflineAfter time.Duration
	// LateFor: an agent whose heartbeat came late on a live stream
	// (more than twice the interval after the one before) within this
	// long is degraded (0: 5m). Silence is offline, not late: a silent
	// agent is not paged as degraded first.
	LateFor time.Duration
	// Grace is how long after its enrolment and after each (re)connection
	// (an update restarts the agent) an agent is not degraded.
	Grace time.Duration
	// DiskFullPercent: an agent whose disk is at least this full is
	// degraded (0: 90).
	DiskFullPercent int
	// FailedInRow: an agent whose last this many jobs failed is degraded
	// (0: 3).
	FailedInRow int
	// AlertDelay is how long a health must hold before it is alerted.
	AlertDelay time.Duration
	// AlertDedup is the de-duplication window: after an alert of a
	// problem, another of the same or a lesser problem for the same agent
	// waits until the window has passed (a flapping agent pages once).
	AlertDedup time.Duration
	// Interval is how often health is swept and due alerts are sent.
	Interval time.Duration
	// Sinks receive the alerts.
	Sinks []Sink
	// MaxAttempts bounds the deliveries of one alert to one sink (0: 20);
	// RetryMin and RetryMax bound the delay between them, doubling (0: 2s
	// and 10m).
	MaxAttempts        int
	RetryMin, RetryMax time.Duration
	// OnChange is called after a sweep that recorded a change of health.
	OnChange func()
	Now      func() time.Time
	Log      *slog.Logger
}

func (c *Config) defaults() {
	if c.DiskFullPercent == 0 {
		c.DiskFullPercent = 90
	}
	if c.FailedInRow == 0 {
		c.FailedInRow = 3
	}
	if c.Interval == 0 {
		c.Interval = 5 * time.Second
	}
	if c.LateFor == 0 {
		c.LateFor = 5 * time.Minute
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 20
	}
	if c.RetryMin == 0 {
		c.RetryMin = 2 * time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.OnChange == nil {
		c.OnChange = func() {}
	}
}

// Decide is agent a's health at now, and why (empty when healthy).
// started is when this imsd began sweeping: an agent is never offline for
// silence that began before imsd was there to hear it.
func (c *Config) Decide(a store.AgentHealth, now, started time.Time) (store.Health, string) {
	if a.LastSeenAt.IsZero() {
		if now.Sub(later(a.EnrolledAt, started)) < max(c.Grace, c.OfflineAfter) {
			return store.AgentHealthy, ""
		}
		return store.AgentOffline, "never connected since its enrolment"
	}
	silent := now.Sub(later(a.LastSeenAt, started))
	if silent >= c.OfflineAfter {
		return store.AgentOffline, fmt.Sprintf("no heartbeat for more than %s", c.OfflineAfter)
	}
	if now.Sub(later(a.EnrolledAt, a.ConnectedAt)) < c.Grace {
		return store.AgentHealthy, ""
	}
	var why []string
	if !a.LateHeartbeatAt.IsZero() && now.Sub(a.LateHeartbeatAt) < c.LateFor {
		why = append(why, fmt.Sprintf("heartbeats late (one within the last %s)", c.LateFor))
	}
	if cond := a.Condition; cond != nil {
		if cond.FailedInRow >= c.FailedInRow {
			why = append(why, fmt.Sprintf("its last %d jobs failed", cond.FailedInRow))
		}
		if cond.DiskUsedPercent >= c.DiskFullPercent {
			why = append(why, fmt.Sprintf("disk %d%% full", cond.DiskUsedPercent))
		}
	}
	if len(why) > 0 {
		return store.AgentDegraded, strings.Join(why, "; ")
	}
	return store.AgentHealthy, ""
}

// AlertFor is the alert due for agent a at now, if any: the health it
// alerts on (healthy: a recovery).
func (c *Config) AlertFor(a store.AgentHealth, now time.Time) (store.Health, bool) {
	switch {
	case a.LastSeenAt.IsZero():
		// None before the first heartbeat.
		return "", false
	case a.Health == a.AlertedHealth:
		return "", false
	case now.Sub(a.HealthSince) < c.AlertDelay:
		return "", false
	case a.Health == store.AgentHealthy:
		return a.Health, true
	case !a.ProblemAlertAt.IsZero() && now.Sub(a.ProblemAlertAt) < c.AlertDedup &&
		a.Health.Severity() <= a.ProblemAlertHealth.Severity():
		// Flapping: one page per window, unless it got worse.
		return "", false
	}
	return a.Health, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// AlertBody is an alert as the webhook sink sends it (JSON).
type AlertBody struct {
	// ID names the alert; a receiver that sees it twice (a retry whose
	// answer was lost) drops the second.
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Install   string `json:"install"`
	InstallID string `json:"install_id"`
	// Labels are the install's labels, for routing (customer=acme to
	// that customer's on-call).
	Labels      map[string]string `json:"labels,omitempty"`
	AgentID     string            `json:"agent_id"`
	Health      string            `json:"health"`
	Previous    string            `json:"previous"`
	Reason      string            `json:"reason,omitempty"`
	Since       string            `json:"since"`
	Time        string            `json:"time"`
	Recovered   bool              `json:"recovered"`
	Description string            `json:"description"`
}

// Monitor sweeps health, records alerts and delivers them.
type Monitor struct {
	cfg   Config
	store *store.Store
	sinks map[string]Sink
	names []string
	start time.Time
	wake  chan struct{}

	mu   sync.Mutex
	last []store.AgentHealth
	// sweeps counts the sweeps that ended, for tests.
	sweeps atomic.Uint64
}

// Sweeps reports how many sweeps have ended (tests wait on it).
func (m *Monitor) Sweeps() uint64 { return m.sweeps.Load() }

// New returns a monitor; Run runs it.
func New(st *store.Store, cfg Config) *Monitor {
	cfg.defaults()
	m := &Monitor{cfg: cfg, store: st, sinks: map[string]Sink{}, start: cfg.Now(), wake: make(chan struct{}, 1)}
	for _, s := range cfg.Sinks {
		m.sinks[s.Name()] = s
		m.names = append(m.names, s.Name())
	}
	return m
}

// Run sweeps and delivers every Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		if err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Error("sweep agent health", "err", err)
		}
		if err := m.Deliver(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Error("deliver alerts", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.wake:
		}
	}
}

// Sweep decides every agent's health once, records changes and alerts.
func (m *Monitor) Sweep(ctx context.Context) error {
	defer m.sweeps.Add(1)
	agents, err := m.store.ListAgentHealth(ctx)
	if err != nil {
		return err
	}
	now := m.cfg.Now()
	changed, alerted := false, false
	var errs []error
	for i := range agents {
		a := &agents[i]
		h, why := m.cfg.Decide(*a, now, m.start)
		if h != a.Health || why != a.Reason {
			ok, err := m.store.SetAgentHealth(ctx, *a, h, why, now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok && h != a.Health {
				m.cfg.Log.Info("agent health changed", "agent", a.AgentID, "install", a.InstallName, "from", a.Health, "to", h, "reason", why)
				a.HealthSince, changed = now, true
			}
			if !ok {
				// Another replica moved it first: it decides the alert.
				continue
			}
			a.Health, a.Reason = h, why
		}
		al, due := m.cfg.AlertFor(*a, now)
		if !due {
			continue
		}
		body := AlertBody{ID: fmt.Sprintf("al-%s-%d", a.AgentID, now.UnixNano()), Kind: "agent.health", Install: a.InstallName,
			InstallID: a.InstallID, Labels: a.InstallLabels, AgentID: a.AgentID, Health: string(al), Previous: string(a.AlertedHealth), Reason: a.Reason,
			Since: a.HealthSince.UTC().Format(time.RFC3339), Time: now.UTC().Format(time.RFC3339), Recovered: al == store.AgentHealthy}
		body.Description = describe(body)
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		ok, err := m.store.RecordAlert(ctx, *a, store.Alert{ID: body.ID, AgentID: a.AgentID, InstallID: a.InstallID, Health: al, Body: string(b)}, m.names, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			m.cfg.Log.Warn("agent alert", "agent", a.AgentID, "install", a.InstallName, "health", al, "reason", a.Reason, "sinks", len(m.names))
			alerted = true
		}
	}
	m.mu.Lock()
	m.last = agents
	m.mu.Unlock()
	if changed {
		m.cfg.OnChange()
	}
	if alerted {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return errors.Join(errs...)
}

// describe is an alert in one line, for people.
func describe(b AlertBody) string {
	if b.Recovered {
		return fmt.Sprintf("agent %s of install %s is healthy again (was %s)", b.AgentID, b.Install, b.Previous)
	}
	s := fmt.Sprintf("agent %s of install %s is %s since %s", b.AgentID, b.Install, b.Health, b.Since)
	if b.Reason != "" {
		s += ": " + b.Reason
	}
	return s
}

// claimFor is how long an attempt may take before another replica (or
// this one, after a restart) makes it again.
const claimFor = time.Minute

// Deliver sends every due alert of the outbox once.
func (m *Monitor) Deliver(ctx context.Context) error {
	for {
		due, err := m.store.DueAlerts(ctx, m.cfg.Now(), 100)
		if err != nil {
			return err
		}
		sent := 0
		for _, o := range due {
			now := m.cfg.Now()
			sink, ok := m.sinks[o.Sink]
			if !ok {
				if err := m.store.AlertAttemptFailed(ctx, o.ID, fmt.Sprintf("sink %q is not configured", o.Sink), now, true, now); err != nil {
					return err
				}
				continue
			}
			if ok, err := m.store.ClaimAlert(ctx, o, now.Add(claimFor)); err != nil || !ok {
				if err != nil {
					return err
				}
				continue
			}
			sent++
			attempt := o.Attempts + 1
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := sink.Deliver(dctx, []byte(o.Body), now)
			cancel()
			now = m.cfg.Now()
			if err == nil {
				if err := m.store.AlertDelivered(ctx, o.ID, now); err != nil {
					return err
				}
				m.cfg.Log.Info("alert delivered", "alert", o.AlertID, "sink", o.Sink, "attempt", attempt)
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			giveUp := attempt >= m.cfg.MaxAttempts
			next := now.Add(m.retryDelay(attempt))
			m.cfg.Log.Warn("alert not delivered", "alert", o.AlertID, "sink", o.Sink, "attempt", attempt, "gave_up", giveUp, "err", err)
			if err := m.store.AlertAttemptFailed(ctx, o.ID, err.Error(), next, giveUp, now); err != nil {
				return err
			}
		}
		if len(due) < 100 || sent == 0 {
			return nil
		}
	}
}

// retryDelay is the delay after the attempt-th failed delivery: RetryMin,
// doubling, at most RetryMax.
func (m *Monitor) retryDelay(attempt int) time.Duration {
	d := m.cfg.RetryMin
	for i := 1; i < attempt && d < m.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, m.cfg.RetryMax)
}

var (
	upDesc = prometheus.NewDesc("byoc_agent_up",
		"1 while the agent is not offline (imsd heard it within --agent-offline-after), else 0.",
		[]string{"install", "install_id", "agent"}, nil)
	stateDesc = prometheus.NewDesc("byoc_agent_health_state",
		"The agent's health: 1 for its state (healthy, degraded or offline), 0 for the others.",
		[]string{"install", "install_id", "agent", "state"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	ch <- stateDesc
}

// Collect implements prometheus.Collector: the last sweep's health.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	last := m.last
	m.mu.Unlock()
	for _, a := range last {
		up := 1.0
		if a.Health == store.AgentOffline {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, a.InstallName, a.InstallID, a.AgentID)
		for _, s := range []store.Health{store.AgentHealthy, store.AgentDegraded, store.AgentOffline} {
			v := 0.0
			if a.Health == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, v, a.InstallName, a.InstallID, a.AgentID, string(s))
		}
	}
}
