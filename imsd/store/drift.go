package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// Drift statuses of an install component.
const (
	// DriftUnchecked: no drift check has reported yet.
	DriftUnchecked = ""
	DriftInSync    = "in_sync"
	DriftDrifted   = "drifted"
	// DriftFailed: the latest check could not tell (its error says why).
	DriftFailed = "failed"
)

// Drift is the drift state of one install component: the latest schedule
// tick fired, and the latest drift check's result.
type Drift struct {
	InstallID string
	Component string
	// TickAt is the latest schedule tick fired; TickJobID the job it
	// queued ("" when it was skipped because a check was still running).
	TickAt    time.Time
	TickJobID string
	// CheckedAt is when the latest result arrived (zero: none yet), JobID
	// the check that reported it.
	CheckedAt time.Time
	JobID     string
	// Status is DriftUnchecked, DriftInSync, DriftDrifted or DriftFailed.
	Status string
	Error  string
	// Changes are what differs, as the plugin reported it.
	Changes []PlannedChange
}

type driftRow struct {
	InstallID string `db:"install_id"`
	Component string `db:"component"`
	TickAt    int64  `db:"tick_at"`
	TickJobID string `db:"tick_job_id"`
	CheckedAt int64  `db:"checked_at"`
	JobID     string `db:"job_id"`
	Status    string `db:"status"`
	Error     string `db:"error"`
	Changes   string `db:"changes"`
}

const driftCols = `install_id, component, tick_at, tick_job_id, checked_at, job_id, status, error, changes`

func (r driftRow) drift() (Drift, error) {
	d := Drift{InstallID: r.InstallID, Component: r.Component, TickAt: fromNanos(r.TickAt), TickJobID: r.TickJobID,
		CheckedAt: fromNanos(r.CheckedAt), JobID: r.JobID, Status: r.Status, Error: r.Error}
	if r.Changes != "" {
		if err := json.Unmarshal([]byte(r.Changes), &d.Changes); err != nil {
			return d, fmt.Errorf("drift %s/%s changes: %w", r.InstallID, r.Component, err)
		}
	}
	return d, nil
}

// DriftTick is one tick of a component's drift check schedule.
type DriftTick struct {
	InstallID, Component string
	At                   time.Time
}

// FireDrift records drift tick t of a component and queues its check, job
// j (operation drift, for t's install and component), in one transaction.
// Like FireTick, a tick already recorded, or older than the latest, is
// TickTaken (every replica may try; one wins), and a tick that comes while
// an earlier check of the component is still queued, assigned or running
// is recorded without a job (TickSkipped).
func (s *Store) FireDrift(ctx context.Context, t DriftTick, j Job, now time.Time) (TickResult, error) {
	switch {
	case t.InstallID == "":
		return 0, errs.Field("install_id", "required")
	case t.Component == "":
		return 0, errs.Field("component", "required")
	case j.InstallID != t.InstallID || j.Component != t.Component || j.Operation != "drift":
		return 0, errs.Field("job", "must be a drift check of component %s of install %s", t.Component, t.InstallID)
	}
	if err := requireTime("tick_at", t.At); err != nil {
		return 0, err
	}
	if err := requireTime("now", now); err != nil {
		return 0, err
	}
	config, err := checkNewJob(j)
	if err != nil {
		return 0, err
	}
	var res TickResult
	err = s.write(ctx, "fire drift check", func(tx *txn) error {
		var busy int
		if err := tx.GetContext(ctx, &busy, s.bind(`SELECT COUNT(*) FROM jobs WHERE install_id = ? AND component = ? AND operation = 'drift'
			AND `+s.phaseIs(JobQueued, JobAssigned, JobRunning)+`state IN ('queued', 'assigned', 'running')`), t.InstallID, t.Component); err != nil {
			return err
		}
		jobID := j.ID
		if busy > 0 {
			jobID = ""
		}
		r, err := tx.ExecContext(ctx, s.bind(`INSERT INTO install_drift (install_id, component, tick_at, tick_job_id) VALUES (?, ?, ?, ?)
			ON CONFLICT (install_id, component) DO UPDATE SET tick_at = excluded.tick_at, tick_job_id = excluded.tick_job_id
			WHERE install_drift.tick_at < excluded.tick_at`), t.InstallID, t.Component, nanos(t.At), jobID)
		if err != nil {
			if isForeignKey(err) {
				return errs.E(errs.NotFound, "install %q not found", t.InstallID)
			}
			return err
		}
		if n, err := r.RowsAffected(); err != nil || n == 0 {
			res = TickTaken
			return err
		}
		if busy > 0 {
			res = TickSkipped
			return nil
		}
		res = TickFired
		return s.insertQueued(ctx, tx, j, config)
	})
	return res, err
}

// recordDrift keeps the result of a drift check job as its component's
// latest, unless a later one is already kept. A job of another operation
// or of no component changes nothing.
func (s *Store) recordDrift(ctx context.Context, tx *txn, jobID string, r Result, plan string, now time.Time) error {
	status := DriftInSync
	switch {
	case r.State != JobSucceeded:
		status = DriftFailed
	case r.Drifted:
		status = DriftDrifted
	}
	errText := ""
	if status == DriftFailed {
		errText = truncate(r.Error, 512)
		if errText == "" {
			errText = "the check ended " + string(r.State)
		}
	}
	_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO install_drift (install_id, component, checked_at, job_id, status, error, changes)
		SELECT install_id, component, ?, id, ?, ?, ? FROM jobs WHERE id = ? AND operation = 'drift' AND component <> ''
		ON CONFLICT (install_id, component) DO UPDATE SET checked_at = excluded.checked_at, job_id = excluded.job_id,
			status = excluded.status, error = excluded.error, changes = excluded.changes
		WHERE install_drift.checked_at <= excluded.checked_at`), nanos(now), status, errText, plan, jobID)
	return err
}

// ListDrift returns the drift state of an install's components that have
// one, by component name.
func (s *Store) ListDrift(ctx context.Context, installID string) ([]Drift, error) {
	var rows []driftRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+driftCols+` FROM install_drift WHERE install_id = ? ORDER BY component`), installID); err != nil {
		return nil, fmt.Errorf("install %s drift: %w", installID, err)
	}
	out := make([]Drift, 0, len(rows))
	for _, r := range rows {
		d, err := r.drift()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// LastDriftTicks returns the latest drift tick fired of every install
// component, by install id and component.
func (s *Store) LastDriftTicks(ctx context.Context) (map[string]map[string]time.Time, error) {
	var rows []struct {
		InstallID string `db:"install_id"`
		Component string `db:"component"`
		At        int64  `db:"tick_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT install_id, component, tick_at FROM install_drift WHERE tick_at > 0`); err != nil {
		return nil, fmt.Errorf("last drift ticks: %w", err)
	}
	out := map[string]map[string]time.Time{}
	for _, r := range rows {
		if out[r.InstallID] == nil {
			out[r.InstallID] = map[string]time.Time{}
		}
		out[r.InstallID][r.Component] = fromNanos(r.At)
	}
	return out, nil
}

// encodePolicy stores policy findings as a JSON array; none as "".
func encodePolicy(fs []PolicyFinding) (string, error) {
	if len(fs) == 0 {
		return "", nil
	}
	for i, f := range fs {
		if f.Level != "deny" && f.Level != "warn" {
			return "", errs.Field(fmt.Sprintf("policy_findings[%d].level", i), "must be deny or warn, got %q", f.Level)
		}
		if f.Source != "vendor" && f.Source != "customer" {
			return "", errs.Field(fmt.Sprintf("policy_findings[%d].source", i), "must be vendor or customer, got %q", f.Source)
		}
	}
	b, err := json.Marshal(fs)
	if err != nil {
		return "", fmt.Errorf("encode policy findings: %w", err)
	}
	return string(b), nil
}

// policyAudit adds a job's policy findings to its job.finished event:
// how many of each level, and the deny and warn messages (shortened).
func policyAudit(data map[string]string, fs []PolicyFinding) {
	if len(fs) == 0 {
		return
	}
	var deny, warn []string
	for _, f := range fs {
		line := f.Source + " " + f.Policy + ": " + f.Message
		if f.Level == "deny" {
			deny = append(deny, line)
		} else {
			warn = append(warn, line)
		}
	}
	data["policy"] = strconv.Itoa(len(deny)) + " deny, " + strconv.Itoa(len(warn)) + " warn"
	if len(deny) > 0 {
		data["policy_deny"] = truncate(strings.Join(deny, "; "), 1024)
	}
	if len(warn) > 0 {
		data["policy_warn"] = truncate(strings.Join(warn, "; "), 1024)
	}
}
