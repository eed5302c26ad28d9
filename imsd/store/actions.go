package store

import (
	"context"
	"fmt"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// ActionRun is a workflow of kind action with what its one step's job
// reported.
type ActionRun struct {
	Workflow Workflow
	// JobID is the job of the step's latest attempt ("" before it starts).
	JobID string
	// Outputs are the job's outputs (the keys the action wrote to
	// $BYOC_OUTPUTS).
	Outputs map[string]string
}

// ActionRunFilter selects action runs for ListActionRuns.
type ActionRunFilter struct {
	InstallID string
	// Action keeps only the runs of one action when set.
	Action string
	// Limit is at most 1000; 0 means 100.
	Limit int
}

// ListActionRuns returns an install's action runs, newest first.
func (s *Store) ListActionRuns(ctx context.Context, f ActionRunFilter) ([]ActionRun, error) {
	if f.InstallID == "" {
		return nil, errs.Field("install_id", "required")
	}
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, errs.Field("limit", "must be between 1 and 1000, got %d", limit)
	}
	var rows []struct {
		workflowRow
		JobID   string `db:"step_job_id"`
		Outputs string `db:"job_outputs"`
	}
	// An action run has one step; its job holds the outputs.
	q := fmt.Sprintf(`SELECT `+prefixed("w.", workflowCols)+`, COALESCE(st.job_id, '') AS step_job_id, COALESCE(j.outputs, '{}') AS job_outputs
		FROM workflows w
		LEFT JOIN workflow_steps st ON st.workflow_id = w.id
		LEFT JOIN jobs j ON j.id = st.job_id
		WHERE w.install_id = ? AND w.kind = 'action' AND (? = '' OR w.action = ?)
		ORDER BY w.created_at DESC, w.id DESC LIMIT %d`, limit)
	if err := s.r.SelectContext(ctx, &rows, s.bind(q), f.InstallID, f.Action, f.Action); err != nil {
		return nil, fmt.Errorf("list action runs: %w", err)
	}
	out := make([]ActionRun, len(rows))
	for i, r := range rows {
		outputs, err := decodeMap(r.Outputs)
		if err != nil {
			return nil, fmt.Errorf("action run %s outputs: %w", r.ID, err)
		}
		out[i] = ActionRun{Workflow: r.workflow(), JobID: r.JobID, Outputs: outputs}
	}
	return out, nil
}

// prefixed qualifies every column of a column list with p.
func prefixed(p, cols string) string {
	out := []byte{}
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' && c != '\n' && c != '\t' {
			out = append(out, p...)
			start = false
		}
		out = append(out, c)
		if c == ',' {
			start = true
		}
	}
	return string(out)
}

// EndActionRun ends action run id like EndWorkflow, and when health is not
// nil sets its install's health in the same transaction (a health-check
// action's result). ok is false when the run had already ended.
func (s *Store) EndActionRun(ctx context.Context, id string, state WorkflowState, msg string, health *InstallHealth, now time.Time) (ok bool, err error) {
	if !state.Terminal() {
		return false, errs.Field("state", "%q is not a final workflow state", state)
	}
	if health != nil {
		if health.State != HealthHealthy && health.State != HealthUnhealthy {
			return false, errs.Field("health.state", "must be healthy or unhealthy, not %q", health.State)
		}
		if err := requireTime("health.at", health.At); err != nil {
			return false, err
		}
	}
	err = s.write(ctx, "end action run", func(tx *txn) error {
		var err error
		ok, err = s.endWorkflow(ctx, tx, id, state, msg, "", 0, health, now)
		return err
	})
	return ok, err
}

// Tick is one tick of a cron trigger: the time the schedule named, for
// one action of one install.
type Tick struct {
	InstallID string
	Action    string
	At        time.Time
}

// TickResult says what FireTick did.
type TickResult int

// The results of FireTick.
const (
	// TickFired: the tick is recorded and its run queued.
	TickFired TickResult = iota
	// TickTaken: the tick, or a later one of the same action, was already
	// recorded (by another replica, or before a restart); nothing changed.
	TickTaken
	// TickSkipped: the tick is recorded without a run, because an earlier
	// run of the action had not ended yet.
	TickSkipped
)

// FireTick records cron tick t and queues its action run wf, in one
// transaction, exactly once: the tick's primary key refuses a second insert
// of the same tick, and a tick older than one already recorded for the
// action is refused too (a replica that read the ticks before another
// fired a later one). When a run of the same action is queued or running,
// the tick is recorded without a run (TickSkipped), so a busy install
// collects at most one waiting run per cron action. Only the action's
// latest tick is kept.
func (s *Store) FireTick(ctx context.Context, t Tick, wf Workflow, now time.Time) (TickResult, error) {
	switch {
	case t.InstallID == "":
		return 0, errs.Field("install_id", "required")
	case t.Action == "":
		return 0, errs.Field("action", "required")
	case wf.InstallID != t.InstallID || wf.Action != t.Action || wf.Kind != "action":
		return 0, errs.Field("workflow", "must be a run of action %s of install %s", t.Action, t.InstallID)
	}
	if err := requireTime("tick_at", t.At); err != nil {
		return 0, err
	}
	if err := requireTime("now", now); err != nil {
		return 0, err
	}
	if err := checkWorkflow(wf); err != nil {
		return 0, err
	}
	var res TickResult
	err := s.write(ctx, "fire tick", func(tx *txn) error {
		var busy int
		err := tx.GetContext(ctx, &busy, s.bind(`SELECT COUNT(*) FROM workflows WHERE install_id = ? AND kind = 'action' AND action = ?
			AND state IN ('queued', 'awaiting_approval', 'running')`), t.InstallID, t.Action)
		if err != nil {
			return err
		}
		wfID := wf.ID
		if busy > 0 {
			wfID = ""
		}
		r, err := tx.ExecContext(ctx, s.bind(`INSERT INTO trigger_ticks (install_id, action, tick_at, workflow_id, fired_at)
			SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM trigger_ticks WHERE install_id = ? AND action = ? AND tick_at >= ?)
			ON CONFLICT DO NOTHING`),
			t.InstallID, t.Action, nanos(t.At), wfID, nanos(now), t.InstallID, t.Action, nanos(t.At))
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
		if _, err := tx.ExecContext(ctx, s.bind(`DELETE FROM trigger_ticks WHERE install_id = ? AND action = ? AND tick_at < ?`),
			t.InstallID, t.Action, nanos(t.At)); err != nil {
			return err
		}
		if busy > 0 {
			res = TickSkipped
			return s.Audit(ctx, tx, AuditEvent{Chain: t.InstallID, At: now, Kind: "action.tick_skipped", Actor: "imsd",
				Subject: "action:" + t.Action, Data: map[string]string{"tick": t.At.UTC().Format(time.RFC3339), "why": "a run of the action is queued or running"}})
		}
		res = TickFired
		return s.insertWorkflow(ctx, tx, wf)
	})
	return res, err
}

// LastTicks returns the latest recorded tick of every install's cron
// actions, by install id and action name.
func (s *Store) LastTicks(ctx context.Context) (map[string]map[string]time.Time, error) {
	var rows []struct {
		InstallID string `db:"install_id"`
		Action    string `db:"action"`
		At        int64  `db:"tick_at"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT install_id, action, MAX(tick_at) AS tick_at FROM trigger_ticks GROUP BY install_id, action`); err != nil {
		return nil, fmt.Errorf("last ticks: %w", err)
	}
	out := map[string]map[string]time.Time{}
	for _, r := range rows {
		if out[r.InstallID] == nil {
			out[r.InstallID] = map[string]time.Time{}
		}
		out[r.InstallID][r.Action] = fromNanos(r.At)
	}
	return out, nil
}
