// Jobs, shared: the jobs table's row mapping (jobRow, jobCols) and the
// helpers every job transition uses (jobForWrite, updateJob, checkWriter,
// tryExec, agentInstall). A job's lifecycle is in jobs_enqueue.go,
// jobs_lease.go, jobs_finish.go and jobs_list.go.

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

type jobRow struct {
	ID              string `db:"id"`
	InstallID       string `db:"install_id"`
	ComponentType   string `db:"component_type"`
	Operation       string `db:"operation"`
	Config          string `db:"config"`
	State           string `db:"state"`
	Attempt         int    `db:"attempt"`
	MaxAttempts     int    `db:"max_attempts"`
	TimeoutNS       int64  `db:"timeout_ns"`
	FencingToken    int64  `db:"fencing_token"`
	AgentID         string `db:"agent_id"`
	LeaseDeadline   int64  `db:"lease_deadline"`
	CancelRequested bool   `db:"cancel_requested"`
	CancelReason    string `db:"cancel_reason"`
	CreatedAt       int64  `db:"created_at"`
	StartedAt       int64  `db:"started_at"`
	EndedAt         int64  `db:"ended_at"`
	ExitCode        int    `db:"exit_code"`
	Error           string `db:"error"`
	Outputs         string `db:"outputs"`
	CreatedBy       string `db:"created_by"`
	Mode            string `db:"mode"`
	Component       string `db:"component"`
	Plan            string `db:"plan"`
	PlanDigest      string `db:"plan_digest"`
	ApprovedPlan    string `db:"approved_plan_digest"`
	Policy          string `db:"policy"`
	ReleaseID       string `db:"release_id"`
	WindowBound     bool   `db:"window_bound"`
}

const jobCols = `id, install_id, component_type, operation, config, state, attempt, max_attempts, timeout_ns,
	fencing_token, agent_id, lease_deadline, cancel_requested, cancel_reason, created_at, started_at, ended_at,
	exit_code, error, outputs, created_by, mode, component, plan, policy, plan_digest, approved_plan_digest, release_id, window_bound`

// jobColsQualified is jobCols prefixed with the table name, for statements
// that join another relation with the same column names.
var jobColsQualified = func() string {
	cols := strings.Split(jobCols, ",")
	for i, c := range cols {
		cols[i] = "jobs." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}()

// dest returns pointers to r's fields in the order of jobCols, for Scan.
func (r *jobRow) dest() []any {
	return []any{&r.ID, &r.InstallID, &r.ComponentType, &r.Operation, &r.Config, &r.State, &r.Attempt, &r.MaxAttempts,
		&r.TimeoutNS, &r.FencingToken, &r.AgentID, &r.LeaseDeadline, &r.CancelRequested, &r.CancelReason, &r.CreatedAt,
		&r.StartedAt, &r.EndedAt, &r.ExitCode, &r.Error, &r.Outputs, &r.CreatedBy, &r.Mode, &r.Component, &r.Plan, &r.Policy,
		&r.PlanDigest, &r.ApprovedPlan, &r.ReleaseID, &r.WindowBound}
}

// getJobRow runs q, which returns jobCols, and scans its one row: the
// job statements of every job's lifecycle scan without sqlx's reflection.
func getJobRow(ctx context.Context, tx *txn, q string, args ...any) (jobRow, error) {
	var r jobRow
	err := tx.QueryRowContext(ctx, q, args...).Scan(r.dest()...)
	return r, err
}

// selectJobRows is getJobRow for any number of rows.
func selectJobRows(ctx context.Context, tx *txn, q string, args ...any) ([]jobRow, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []jobRow
	for rows.Next() {
		var r jobRow
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (r jobRow) job() (Job, error) {
	out, err := decodeMap(r.Outputs)
	if err != nil {
		return Job{}, fmt.Errorf("job %s outputs: %w", r.ID, err)
	}
	var plan []PlannedChange
	if r.Plan != "" {
		if err := json.Unmarshal([]byte(r.Plan), &plan); err != nil {
			return Job{}, fmt.Errorf("job %s plan: %w", r.ID, err)
		}
	}
	var findings []PolicyFinding
	if r.Policy != "" {
		if err := json.Unmarshal([]byte(r.Policy), &findings); err != nil {
			return Job{}, fmt.Errorf("job %s policy: %w", r.ID, err)
		}
	}
	return Job{
		ID: r.ID, InstallID: r.InstallID, ComponentType: r.ComponentType, Operation: r.Operation,
		Config: []byte(r.Config), State: JobState(r.State), Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		Timeout: time.Duration(r.TimeoutNS), FencingToken: r.FencingToken, AgentID: r.AgentID,
		LeaseDeadline: fromNanos(r.LeaseDeadline), CancelRequested: r.CancelRequested, CancelReason: r.CancelReason,
		CreatedAt: fromNanos(r.CreatedAt), StartedAt: fromNanos(r.StartedAt), EndedAt: fromNanos(r.EndedAt),
		ExitCode: r.ExitCode, Error: r.Error, Outputs: out, CreatedBy: r.CreatedBy, Mode: Mode(r.Mode), Component: r.Component, WindowBound: r.WindowBound,
		PlannedChanges: plan, PolicyFindings: findings, PlanDigest: r.PlanDigest, ApprovedPlanDigest: r.ApprovedPlan,
		ReleaseID: r.ReleaseID,
	}, nil
}

func toJobs(rows []jobRow) ([]Job, error) {
	out := make([]Job, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = r.job(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// agentInstall returns the install agent agentID is bound to, or "" when
// there is no such agent: from a cache once found, since the binding
// never changes, else read inside tx.
func (s *Store) agentInstall(ctx context.Context, tx *txn, agentID string) (string, error) {
	if id, ok := s.agentInstalls.get(agentID); ok {
		return id, nil
	}
	var install string
	err := tx.QueryRowContext(ctx, s.bind(`SELECT install_id FROM agents WHERE id = ?`), agentID).Scan(&install)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	s.agentInstalls.put(agentID, install)
	return install, nil
}

// jobForWrite reads a job inside a write transaction, locking its row on
// PostgreSQL until the transaction ends.
func (s *Store) jobForWrite(ctx context.Context, tx *txn, id string) (Job, error) {
	r, err := getJobRow(ctx, tx, s.bind(`SELECT `+jobCols+` FROM jobs WHERE id = ?`+s.forUpdate()), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, errs.E(errs.NotFound, "job %q not found", id)
	}
	if err != nil {
		return Job{}, err
	}
	return r.job()
}

// updateJob runs an UPDATE ... RETURNING on one job and returns it.
func (s *Store) updateJob(ctx context.Context, tx *txn, q string, args ...any) (Job, error) {
	r, err := getJobRow(ctx, tx, s.bind(q+` RETURNING `+jobCols), args...)
	if err != nil {
		return Job{}, err
	}
	return r.job()
}

// checkWriter refuses a write back to j from anyone but the agent holding
// its current lease. An agent of another install learns nothing about the
// job beyond that it is not its own; an agent of the same install that lost
// the lease (the job was requeued, or another attempt holds it) is told its
// fencing token is stale, which is terminal for that job on that agent.
func (s *Store) checkWriter(ctx context.Context, tx *txn, j Job, w Writer) error {
	foreign := errs.E(errs.PermissionDenied, "job %s does not belong to this agent", j.ID)
	if j.AgentID != w.AgentID || j.AgentID == "" {
		install, err := s.agentInstall(ctx, tx, w.AgentID)
		if err != nil {
			return err
		}
		if install != j.InstallID { // "" for no such agent
			return foreign
		}
		if j.AgentID != "" && j.FencingToken == w.FencingToken {
			return foreign // the holder's token from another agent: forged
		}
		if j.FencingToken == w.FencingToken {
			// Requeued: nobody holds the lease the writer had.
			return errs.E(errs.Conflict, "stale fencing token for job %s: its lease expired and it was requeued", j.ID)
		}
	}
	if j.FencingToken != w.FencingToken {
		if j.State.Terminal() {
			return errs.E(errs.Conflict, "job %s already ended", j.ID)
		}
		return errs.E(errs.Conflict, "stale fencing token for job %s: attempt %d now holds the lease", j.ID, j.Attempt)
	}
	return nil
}

// tryExec runs an UPDATE that changes at most one row; ok is false when
// no row matched.
func (s *Store) tryExec(ctx context.Context, tx *txn, q string, args ...any) (ok bool, err error) {
	res, err := tx.ExecContext(ctx, s.bind(q), args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
