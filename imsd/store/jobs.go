package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// TimeoutGrace is how long past a running job's timeout ExpireLeases waits
// before it marks the job timed out. The agent enforces the timeout itself
// and reports the result; the sweeper is only the backstop.
const TimeoutGrace = time.Minute

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
}

const jobCols = `id, install_id, component_type, operation, config, state, attempt, max_attempts, timeout_ns,
	fencing_token, agent_id, lease_deadline, cancel_requested, cancel_reason, created_at, started_at, ended_at,
	exit_code, error, outputs, created_by, mode, component, plan, policy, plan_digest, approved_plan_digest`

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
		&r.PlanDigest, &r.ApprovedPlan}
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
		ExitCode: r.ExitCode, Error: r.Error, Outputs: out, CreatedBy: r.CreatedBy, Mode: Mode(r.Mode), Component: r.Component,
		PlannedChanges: plan, PolicyFindings: findings, PlanDigest: r.PlanDigest, ApprovedPlanDigest: r.ApprovedPlan,
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

// EnqueueJob stores j as a queued job at attempt 0. The caller fills in
// the ID, CreatedAt and defaults; MaxAttempts must be at least 1 and
// Timeout positive. State, attempt, lease and result fields are ignored.
func (s *Store) EnqueueJob(ctx context.Context, j Job) error {
	config, err := checkNewJob(j)
	if err != nil {
		return err
	}
	return s.writeOne(ctx, "enqueue job", func(tx *txn) error {
		return s.insertQueued(ctx, tx, j, config)
	})
}

// checkNewJob validates a job to enqueue and returns its config as stored.
func checkNewJob(j Job) (config string, err error) {
	switch {
	case j.ID == "":
		return "", errs.Field("id", "required")
	case j.InstallID == "":
		return "", errs.Field("install_id", "required")
	case j.ComponentType == "":
		return "", errs.Field("component_type", "required")
	case j.Operation == "":
		return "", errs.Field("operation", "required")
	case j.MaxAttempts < 1:
		return "", errs.Field("max_attempts", "must be at least 1, got %d", j.MaxAttempts)
	case j.Timeout <= 0:
		return "", errs.Field("timeout", "must be positive, got %s", j.Timeout)
	case j.Mode != "" && !j.Mode.Valid():
		return "", errs.Field("mode", "must be provision, maintenance, deprovision or break_glass, got %q", j.Mode)
	}
	if err := requireTime("created_at", j.CreatedAt); err != nil {
		return "", err
	}
	if len(j.Config) == 0 {
		return "{}", nil
	}
	if !json.Valid(j.Config) {
		return "", errs.Field("config", "not valid JSON")
	}
	return string(j.Config), nil
}

// insertError names what a failed job INSERT ran into.
func insertError(j Job, err error) error {
	switch {
	case isUnique(err):
		return errs.E(errs.AlreadyExists, "job %q already exists", j.ID)
	case isForeignKey(err):
		return errs.E(errs.NotFound, "install %q not found", j.InstallID)
	}
	return err
}

// modeOf is the mode a new job is stored with: its own, or maintenance.
func modeOf(j Job) Mode {
	if j.Mode == "" {
		return ModeMaintenance
	}
	return j.Mode
}

func (s *Store) insertQueued(ctx context.Context, tx *txn, j Job, config string) error {
	_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO jobs (id, install_id, component_type, operation, config, state,
		max_attempts, timeout_ns, created_at, created_by, mode, component, approved_plan_digest)
		VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)`),
		j.ID, j.InstallID, j.ComponentType, j.Operation, config, j.MaxAttempts, int64(j.Timeout), nanos(j.CreatedAt), j.CreatedBy, string(modeOf(j)),
		j.Component, j.ApprovedPlanDigest)
	if err != nil {
		return insertError(j, err)
	}
	var data map[string]string
	if j.ApprovedPlanDigest != "" {
		data = map[string]string{"approved_plan_digest": j.ApprovedPlanDigest}
	}
	if err := s.Audit(ctx, tx, jobEvent(j, "job.queued", j.CreatedBy, j.CreatedAt, data)); err != nil {
		return err
	}
	return s.notifyJobs(ctx, tx, j.InstallID)
}

// EnqueueAssigned stores j as EnqueueJob does, but already handed to agent
// agentID when that agent belongs to j's install: assigned, at attempt 1,
// with a new fencing token and a lease until leaseUntil, as if ClaimJobs
// had claimed it at once. It saves the claim (a second write) when the
// caller knows an agent of the install has a free slot. assigned is false
// when the agent is not one of the install's (unknown, or of another
// install): the job is then stored queued, like EnqueueJob. The returned
// job is what was stored. It is one INSERT ... VALUES, with the agent's
// install from a cache: see docs/performance.md for why not INSERT ...
// SELECT.
func (s *Store) EnqueueAssigned(ctx context.Context, j Job, agentID string, leaseUntil time.Time) (out Job, assigned bool, err error) {
	if agentID == "" {
		return Job{}, false, errs.Field("agent_id", "required")
	}
	n := NewJob{Job: j, AgentID: agentID, LeaseUntil: leaseUntil}
	config, err := n.check()
	if err != nil {
		return Job{}, false, err
	}
	err = s.writeOne(ctx, "enqueue job", func(tx *txn) error {
		out, err = s.insertNew(ctx, tx, n, config)
		return err
	})
	if err != nil {
		return Job{}, false, err
	}
	return out, out.State == JobAssigned, nil
}

// NewJob is a job to enqueue with EnqueueJobs: Job as EnqueueJob takes
// it, and optionally the connected agent to hand it to at once, as
// EnqueueAssigned does.
type NewJob struct {
	Job
	// AgentID, when set, is the agent to assign the job to if it belongs
	// to the job's install; LeaseUntil is then the lease's end.
	AgentID    string
	LeaseUntil time.Time
}

func (n NewJob) check() (config string, err error) {
	config, err = checkNewJob(n.Job)
	if err != nil || n.AgentID == "" {
		return config, err
	}
	if !n.LeaseUntil.After(n.CreatedAt) {
		return "", errs.Field("lease_until", "must be after created_at")
	}
	return config, nil
}

// MaxEnqueueBatch caps the jobs of one EnqueueJobs call.
const MaxEnqueueBatch = 1000

// EnqueueJobs stores jobs in one transaction, all or none: an invalid job
// (its error names jobs[i]), a duplicate id or an unknown install stores
// nothing. Each job with an AgentID of its install is stored assigned to
// that agent, the others queued. The stored jobs are returned in order.
func (s *Store) EnqueueJobs(ctx context.Context, jobs []NewJob) ([]Job, error) {
	configs, err := checkNewJobs(jobs)
	if err != nil {
		return nil, err
	}
	var out []Job
	err = s.write(ctx, "enqueue jobs", func(tx *txn) error {
		out, err = s.insertNewJobs(ctx, tx, jobs, configs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkNewJobs checks a batch for EnqueueJobs and returns its configs as
// stored.
func checkNewJobs(jobs []NewJob) ([]string, error) {
	if len(jobs) == 0 {
		return nil, errs.Field("jobs", "required")
	}
	if len(jobs) > MaxEnqueueBatch {
		return nil, errs.Field("jobs", "%d jobs; at most %d in one call", len(jobs), MaxEnqueueBatch)
	}
	configs := make([]string, len(jobs))
	for i, n := range jobs {
		c, err := n.check()
		if err != nil {
			return nil, errs.Prefix(fmt.Sprintf("jobs[%d]", i), err)
		}
		configs[i] = c
	}
	return configs, nil
}

// insertNewJobs inserts a checked batch in tx and returns the jobs as
// stored.
func (s *Store) insertNewJobs(ctx context.Context, tx *txn, jobs []NewJob, configs []string) ([]Job, error) {
	out := make([]Job, len(jobs))
	for i, n := range jobs {
		j, err := s.insertNew(ctx, tx, n, configs[i])
		if err != nil {
			return nil, errs.Prefix(fmt.Sprintf("jobs[%d]", i), err)
		}
		out[i] = j
	}
	return out, nil
}

// insertNew inserts a checked job: assigned to n.AgentID when that agent
// is one of the install's, else queued. It returns the job as stored.
func (s *Store) insertNew(ctx context.Context, tx *txn, n NewJob, config string) (Job, error) {
	j := n.Job
	j.Config = []byte(config)
	j.Mode = modeOf(j)
	j.State, j.Attempt, j.CancelRequested, j.CancelReason = JobQueued, 0, false, ""
	j.FencingToken, j.AgentID, j.LeaseDeadline = 0, "", time.Time{}
	j.StartedAt, j.EndedAt, j.ExitCode, j.Error, j.Outputs = time.Time{}, time.Time{}, 0, "", nil
	if n.AgentID != "" {
		// The agent's install is checked inside the write transaction, so
		// a job never goes to another install's agent.
		install, err := s.agentInstall(ctx, tx, n.AgentID)
		if err != nil {
			return Job{}, err
		}
		if install == j.InstallID {
			token := newFencingToken()
			// A single-row INSERT ... VALUES: SQLite runs it without the
			// statement journal an INSERT ... SELECT needs, which cost a
			// third of the insert.
			_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO jobs (id, install_id, component_type, operation, config, state,
				attempt, max_attempts, timeout_ns, fencing_token, agent_id, lease_deadline, created_at, created_by, mode, component)
				VALUES (?, ?, ?, ?, ?, 'assigned', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				j.ID, j.InstallID, j.ComponentType, j.Operation, config, j.MaxAttempts, int64(j.Timeout), token,
				n.AgentID, nanos(n.LeaseUntil), nanos(j.CreatedAt), j.CreatedBy, string(j.Mode), j.Component)
			if err != nil {
				return Job{}, insertError(j, err)
			}
			j.State, j.Attempt, j.FencingToken, j.AgentID, j.LeaseDeadline = JobAssigned, 1, token, n.AgentID, n.LeaseUntil
			return j, s.Audit(ctx, tx, jobEvent(j, "job.assigned", j.CreatedBy, j.CreatedAt, map[string]string{"agent": n.AgentID, "attempt": "1"}))
		}
	}
	return j, s.insertQueued(ctx, tx, j, config)
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

// GetJob returns the job with ID id.
func (s *Store) GetJob(ctx context.Context, id string) (Job, error) {
	var r jobRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+jobCols+` FROM jobs WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, errs.E(errs.NotFound, "job %q not found", id)
	}
	if err != nil {
		return Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	return r.job()
}

// ListJobs returns the jobs f selects, newest first, and a cursor for the
// next page ("" on the last page).
func (s *Store) ListJobs(ctx context.Context, f JobFilter) (jobs []Job, nextCursor string, err error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, "", errs.Field("limit", "must be between 1 and 1000, got %d", limit)
	}
	var (
		where []string
		args  []any
	)
	if f.InstallID != "" {
		where = append(where, "install_id = ?")
		args = append(args, f.InstallID)
	}
	if len(f.States) > 0 {
		for i, st := range f.States {
			if !validState(st) {
				return nil, "", errs.Field(fmt.Sprintf("states[%d]", i), "unknown job state %q", st)
			}
			args = append(args, string(st))
		}
		where = append(where, "state IN ("+placeholders(len(f.States))+")")
	}
	if f.Cursor != "" {
		at, id, ok := parseCursor(f.Cursor)
		if !ok {
			return nil, "", errs.Field("cursor", "not a cursor from a previous page")
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, at, at, id)
	}
	q := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	// A bound LIMIT makes SQLite compile the query twice; limit is an int
	// (docs/performance.md, "Limits written into the SQL").
	q += ` ORDER BY created_at DESC, id DESC LIMIT ` + strconv.Itoa(limit+1)
	var rows []jobRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(q), args...); err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		nextCursor = makeCursor(last.CreatedAt, last.ID)
	}
	out, err := toJobs(rows)
	return out, nextCursor, err
}

func validState(s JobState) bool {
	switch s {
	case JobQueued, JobAssigned, JobRunning:
		return true
	}
	return s.Terminal()
}

// A cursor is the (created_at, id) of the last job of a page. It is
// base64 so clients treat it as opaque.
func makeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + "/" + id))
}

func parseCursor(c string) (at int64, id string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", false
	}
	a, id, ok := strings.Cut(string(b), "/")
	if !ok || id == "" {
		return 0, "", false
	}
	at, err = strconv.ParseInt(a, 10, 64)
	return at, id, err == nil
}

// ClaimJobs hands up to n of the oldest queued jobs of an install to agent
// w.AgentID: each becomes assigned, at the next attempt, with a new fencing
// token and a lease until leaseUntil. It returns the claimed jobs, oldest
// first. Concurrent claimers, in this process or in other replicas on the
// same PostgreSQL, never get the same job.
func (s *Store) ClaimJobs(ctx context.Context, installID string, w Writer, n int, leaseUntil, now time.Time) ([]Job, error) {
	if w.AgentID == "" {
		return nil, errs.Field("agent_id", "required")
	}
	if !leaseUntil.After(now) {
		return nil, errs.Field("lease_until", "must be after now")
	}
	if n <= 0 {
		return nil, nil
	}
	var rows []jobRow
	err := s.writeOne(ctx, "claim jobs", func(tx *txn) error {
		var err error
		if s.postgres() {
			// SKIP LOCKED passes over the rows other claimers hold; each
			// claimed row takes its token from the array by its rank.
			tokens := make([]int64, n)
			for i := range tokens {
				tokens[i] = newFencingToken()
			}
			rows, err = selectJobRows(ctx, tx, `UPDATE jobs SET state = 'assigned', attempt = attempt + 1, agent_id = $1,
				lease_deadline = $2, started_at = 0, fencing_token = c.token
				FROM (SELECT id, ($3::BIGINT[])[row_number() OVER (ORDER BY created_at, id)] AS token
				      FROM (SELECT id, created_at FROM jobs WHERE install_id = $4 AND state = 'queued'
				            ORDER BY created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) q) c
				WHERE jobs.id = c.id AND jobs.state = 'queued' RETURNING `+jobColsQualified,
				w.AgentID, nanos(leaseUntil), tokens, installID, n)
			if err != nil {
				return err
			}
			return s.auditClaims(ctx, tx, installID, w.AgentID, rows, now)
		}
		// SQLite has one writer, so the subquery's rows cannot change
		// under the UPDATE. random() is SQLite's ChaCha20 PRNG, seeded
		// from the OS: tokens stay unguessable. The mask keeps them
		// positive (abs() would overflow on the smallest int64).
		//
		// The limit is written into the SQL, not bound: SQLite plans a
		// bound LIMIT by its value, so it compiles the statement again at
		// every run (a third of the writer's CPU under load). n is an int,
		// and the prepared-statement cache keeps one statement per n.
		// INDEXED BY: without statistics SQLite may prefer
		// jobs_install_created and read the install's whole history.
		rows, err = selectJobRows(ctx, tx, `UPDATE jobs SET state = 'assigned', attempt = attempt + 1, agent_id = ?,
			lease_deadline = ?, started_at = 0, fencing_token = max(1, random() & 9223372036854775807)
			WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_queued WHERE install_id = ? AND state = 'queued' ORDER BY created_at, id LIMIT `+strconv.Itoa(n)+`)
			RETURNING `+jobCols, w.AgentID, nanos(leaseUntil), installID)
		if err != nil {
			return err
		}
		return s.auditClaims(ctx, tx, installID, w.AgentID, rows, now)
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rows, func(a, b jobRow) int {
		if a.CreatedAt != b.CreatedAt {
			return int(min(max(a.CreatedAt-b.CreatedAt, -1), 1))
		}
		return strings.Compare(a.ID, b.ID)
	})
	return toJobs(rows)
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

// AckJob records that the agent started job jobID: assigned becomes
// running and the lease is renewed until leaseUntil. Acking a running job
// again with the same token changes nothing. Callers that want the job
// read it: the usual ack is one UPDATE that returns nothing, since
// returning the row cost as much as the update itself.
func (s *Store) AckJob(ctx context.Context, jobID string, w Writer, leaseUntil, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.writeOne(ctx, "ack job", func(tx *txn) error {
		// The usual case, one statement: the holder acks an assigned job.
		ok, err := s.tryExec(ctx, tx, `UPDATE jobs SET state = 'running', started_at = ?, lease_deadline = ?
			WHERE id = ? AND agent_id = ? AND agent_id <> '' AND fencing_token = ? AND state = 'assigned'`,
			nanos(now), nanos(leaseUntil), jobID, w.AgentID, w.FencingToken)
		if err != nil {
			return err
		}
		if ok {
			return s.auditAgentJob(ctx, tx, w.AgentID, jobID, "job.acked", now, ackData(w))
		}
		// Anything else: a resent ack, or a write to refuse and explain.
		j, err := s.jobForWrite(ctx, tx, jobID)
		if err != nil {
			return err
		}
		if err := s.checkWriter(ctx, tx, j, w); err != nil {
			return err
		}
		switch j.State {
		case JobRunning:
			return nil
		case JobAssigned:
			if _, err = s.updateJob(ctx, tx, `UPDATE jobs SET state = 'running', started_at = ?, lease_deadline = ? WHERE id = ?`,
				nanos(now), nanos(leaseUntil), jobID); err != nil {
				return err
			}
			return s.auditAgentJob(ctx, tx, w.AgentID, jobID, "job.acked", now, ackData(w))
		default:
			return errs.E(errs.Conflict, "job %s already ended", jobID)
		}
	})
}

// ackData is a job.acked record's data: the fencing token the agent acked
// under, by which the agent finds the record in its copy of the chain
// before it starts the attempt.
func ackData(w Writer) map[string]string {
	return map[string]string{"token": strconv.FormatInt(w.FencingToken, 10)}
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

// RenewLeases extends to leaseUntil the lease of every job in leases that
// agentID still holds with that fencing token and that is still assigned
// or running. The IDs of the others are returned as lost.
func (s *Store) RenewLeases(ctx context.Context, agentID string, leases []Lease, leaseUntil time.Time) (renewed, lost []string, err error) {
	if len(leases) == 0 {
		return nil, nil, nil
	}
	const chunk = 200
	held := make(map[string]bool, len(leases))
	err = s.write(ctx, "renew leases", func(tx *txn) error {
		for c := range slices.Chunk(leases, chunk) {
			var b strings.Builder
			args := []any{nanos(leaseUntil), agentID}
			b.WriteString(`UPDATE jobs SET lease_deadline = ? WHERE agent_id = ? AND state IN ('assigned', 'running') AND (`)
			for i, l := range c {
				if i > 0 {
					b.WriteString(` OR `)
				}
				b.WriteString(`(id = ? AND fencing_token = ?)`)
				args = append(args, l.JobID, l.FencingToken)
			}
			b.WriteString(`) RETURNING id`)
			var ids []string
			if err := tx.SelectContext(ctx, &ids, s.bind(b.String()), args...); err != nil {
				return err
			}
			for _, id := range ids {
				held[id] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, l := range leases {
		if held[l.JobID] {
			renewed = append(renewed, l.JobID)
		} else {
			lost = append(lost, l.JobID)
		}
	}
	return renewed, lost, nil
}

// FinishJob records how job jobID ended on its agent. r.State must be
// terminal. changed is false when the job had already ended: finishing it
// again with the same token changes nothing and is no error, so a result
// resent after a lost reply is harmless. The usual finish is one UPDATE
// that returns nothing; callers that want the job read it.
func (s *Store) FinishJob(ctx context.Context, jobID string, w Writer, r Result, now time.Time) (changed bool, err error) {
	if !r.State.Terminal() {
		return false, errs.Field("state", "%q is not a final job state", r.State)
	}
	if err := requireTime("now", now); err != nil {
		return false, err
	}
	plan, err := encodePlan(r.PlannedChanges)
	if err != nil {
		return false, err
	}
	policy, err := encodePolicy(r.PolicyFindings)
	if err != nil {
		return false, err
	}
	write := s.writeOne
	if r.Build != nil {
		// Two changes: the job and its build.
		write = s.write
	}
	err = write(ctx, "finish job", func(tx *txn) error {
		// The usual case, one statement: the holder finishes its job. It
		// returns what the bookkeeping below needs, so a job that is no
		// drift check and no build costs no further statement.
		var install, typ, op string
		err := tx.QueryRowContext(ctx, s.bind(`UPDATE jobs SET state = ?, ended_at = ?, exit_code = ?, error = ?, outputs = ?, plan = ?, policy = ?,
			plan_digest = ?, lease_deadline = 0 WHERE id = ? AND agent_id = ? AND agent_id <> '' AND fencing_token = ? AND state IN ('assigned', 'running')
			RETURNING install_id, component_type, operation`),
			string(r.State), nanos(now), r.ExitCode, r.Error, encodeMap(r.Outputs), plan, policy, r.PlanDigest, jobID, w.AgentID, w.FencingToken).
			Scan(&install, &typ, &op)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if errors.Is(err, sql.ErrNoRows) {
			// A resent result, or a write to refuse and explain.
			j, err := s.jobForWrite(ctx, tx, jobID)
			if err != nil {
				return err
			}
			if err := s.checkWriter(ctx, tx, j, w); err != nil {
				return err
			}
			if j.State.Terminal() {
				return nil
			}
			j, err = s.updateJob(ctx, tx, `UPDATE jobs SET state = ?, ended_at = ?, exit_code = ?, error = ?, outputs = ?, plan = ?, policy = ?,
				plan_digest = ?, lease_deadline = 0 WHERE id = ?`, string(r.State), nanos(now), r.ExitCode, r.Error, encodeMap(r.Outputs), plan, policy,
				r.PlanDigest, jobID)
			if err != nil {
				return err
			}
			install, typ, op = j.InstallID, j.ComponentType, j.Operation
		}
		changed = true
		data := map[string]string{"state": string(r.State), "exit_code": strconv.Itoa(r.ExitCode)}
		if r.Error != "" {
			data["error"] = truncate(r.Error, 512)
		}
		if r.PlanDigest != "" {
			data["plan_digest"] = r.PlanDigest
		}
		policyAudit(data, r.PolicyFindings)
		kind := "job.finished"
		if r.State == JobRefused {
			// The agent refused the job (its check of the assignment, or
			// the customer's permission state): a kind of its own.
			kind = "job.refused"
		}
		if err := s.auditAgentJob(ctx, tx, w.AgentID, jobID, kind, now, data); err != nil {
			return err
		}
		if op == "drift" {
			if err := s.recordDrift(ctx, tx, jobID, r, plan, now); err != nil {
				return err
			}
		}
		if r.Build != nil && r.State == JobSucceeded {
			// Only the build agent's build jobs make builds.
			if install == VendorInstallID && typ == BuildType {
				b := *r.Build
				b.ID, b.CreatedAt = jobID, now
				if err := s.recordBuild(ctx, tx, b); err != nil {
					return err
				}
			}
		}
		return s.notifyLogs(ctx, tx, jobID)
	})
	return changed && err == nil, err
}

// encodePlan stores planned changes as a JSON array; none as "".
func encodePlan(changes []PlannedChange) (string, error) {
	if len(changes) == 0 {
		return "", nil
	}
	for i, c := range changes {
		for _, v := range []json.RawMessage{c.Before, c.After} {
			if len(v) > 0 && !json.Valid(v) {
				return "", errs.Field(fmt.Sprintf("planned_changes[%d]", i), "before or after is not valid JSON")
			}
		}
	}
	b, err := json.Marshal(changes)
	if err != nil {
		return "", fmt.Errorf("encode plan: %w", err)
	}
	return string(b), nil
}

// RequestCancel cancels job jobID: a queued job is cancelled at once; an
// assigned or running one is marked so its agent stops it. Cancelling a
// cancelled job returns it as it is; any other ended job is a Conflict.
// by is who asked (a token's name, or "imsd"), the audit record's actor.
func (s *Store) RequestCancel(ctx context.Context, jobID, reason, by string, now time.Time) (Job, error) {
	if err := requireTime("now", now); err != nil {
		return Job{}, err
	}
	var out Job
	err := s.write(ctx, "cancel job", func(tx *txn) error {
		j, err := s.jobForWrite(ctx, tx, jobID)
		if err != nil {
			return err
		}
		switch j.State {
		case JobCancelled:
			out = j
			return nil
		case JobQueued:
			msg := reason
			if msg == "" {
				msg = "cancelled"
			}
			out, err = s.updateJob(ctx, tx, `UPDATE jobs SET state = 'cancelled', ended_at = ?, error = ?,
				cancel_requested = TRUE, cancel_reason = ? WHERE id = ?`, nanos(now), msg, reason, jobID)
			if err != nil {
				return err
			}
			if err := s.Audit(ctx, tx, jobEvent(j, "job.cancelled", by, now, map[string]string{"reason": truncate(reason, 512)})); err != nil {
				return err
			}
			return s.notifyLogs(ctx, tx, jobID)
		case JobAssigned, JobRunning:
			out, err = s.updateJob(ctx, tx, `UPDATE jobs SET cancel_requested = TRUE, cancel_reason = ? WHERE id = ?`, reason, jobID)
			if err != nil {
				return err
			}
			if err := s.Audit(ctx, tx, jobEvent(j, "job.cancel_requested", by, now, map[string]string{"reason": truncate(reason, 512)})); err != nil {
				return err
			}
			// Wake the replica holding the agent's stream so it passes
			// the cancellation on.
			return s.notifyJobs(ctx, tx, j.InstallID)
		default:
			return errs.E(errs.Conflict, "job %s already %s", jobID, strings.ReplaceAll(string(j.State), "_", " "))
		}
	})
	return out, err
}

// ExpireLeases is the lease sweeper. Every assigned or running job whose
// lease ended before now is cancelled if that was requested, failed if it
// used its last attempt, and queued again otherwise (the attempt number
// goes up at the next claim). A running job more than TimeoutGrace past its
// timeout is timed out. Jobs the sweeper ends get a fresh fencing token, so
// their last agent's late writes are refused. It returns what changed.
func (s *Store) ExpireLeases(ctx context.Context, now time.Time) ([]ExpiredJob, error) {
	if err := requireTime("now", now); err != nil {
		return nil, err
	}
	var out []ExpiredJob
	err := s.write(ctx, "expire leases", func(tx *txn) error {
		var rows []jobRow
		// started_at < now - grace - timeout rather than started_at +
		// timeout + grace < now: the sum can overflow a BIGINT.
		err := tx.SelectContext(ctx, &rows, s.bind(`SELECT `+jobCols+` FROM jobs
			WHERE (state IN ('assigned', 'running') AND lease_deadline < ?)
			   OR (state = 'running' AND started_at < ? - timeout_ns)
			ORDER BY created_at, id`+s.skipLocked()), nanos(now), nanos(now.Add(-TimeoutGrace)))
		if err != nil {
			return err
		}
		requeued := map[string]bool{}
		for _, r := range rows {
			j, err := r.job()
			if err != nil {
				return err
			}
			end := func(state JobState, msg string) (Job, error) {
				return s.updateJob(ctx, tx, `UPDATE jobs SET state = ?, ended_at = ?, error = ?, lease_deadline = 0,
					fencing_token = ? WHERE id = ?`, string(state), nanos(now), msg, newFencingToken(), j.ID)
			}
			var e ExpiredJob
			switch timedOut := j.State == JobRunning && j.StartedAt.Add(j.Timeout+TimeoutGrace).Before(now); {
			case j.CancelRequested:
				msg := j.CancelReason
				if msg == "" {
					msg = "cancelled"
				}
				e.Job, err = end(JobCancelled, msg)
			case timedOut:
				e.Job, err = end(JobTimedOut, fmt.Sprintf("timed out: attempt %d ran longer than its %s timeout and agent %s sent no result within %s after",
					j.Attempt, j.Timeout, j.AgentID, TimeoutGrace))
			case j.Attempt >= j.MaxAttempts:
				e.Job, err = end(JobFailed, s.expiredWhy(ctx, tx, j))
			default:
				e.Requeued = true
				requeued[j.InstallID] = true
				e.Job, err = s.updateJob(ctx, tx, `UPDATE jobs SET state = 'queued', agent_id = '', lease_deadline = 0,
					started_at = 0 WHERE id = ?`, j.ID)
			}
			if err != nil {
				return err
			}
			outcome := string(e.Job.State)
			if e.Requeued {
				outcome = "requeued"
			}
			if err := s.Audit(ctx, tx, jobEvent(j, "job.lease_expired", "imsd", now,
				map[string]string{"agent": j.AgentID, "attempt": strconv.Itoa(j.Attempt), "outcome": outcome})); err != nil {
				return err
			}
			if !e.Requeued {
				if err := s.notifyLogs(ctx, tx, j.ID); err != nil {
					return err
				}
			}
			out = append(out, e)
		}
		for _, id := range slices.Sorted(maps.Keys(requeued)) {
			if err := s.notifyJobs(ctx, tx, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// expiredWhy says why the last attempt of j lost its lease, from what
// imsd knows: an assignment never acknowledged was never read by the
// agent (or never reached it); a running job's lease was not renewed,
// and the agent's last sign of life tells whether it was gone.
func (s *Store) expiredWhy(ctx context.Context, tx *txn, j Job) string {
	head := fmt.Sprintf("lease expired on attempt %d of %d: ", j.Attempt, j.MaxAttempts)
	var seen int64
	_ = tx.GetContext(ctx, &seen, s.bind(`SELECT last_seen_at FROM agents WHERE id = ?`), j.AgentID)
	last := "never seen"
	if seen > 0 {
		last = "last seen " + fromNanos(seen).UTC().Format(time.RFC3339)
	}
	if j.State == JobAssigned {
		return head + fmt.Sprintf("agent %s never acknowledged the assignment (%s): it did not read its stream, or lost it before the job arrived", j.AgentID, last)
	}
	return head + fmt.Sprintf("agent %s stopped renewing it (%s): the agent went away or lost its connection to imsd, and stopped the job itself when its lease ran out", j.AgentID, last)
}

// QueuedJobInstalls returns the IDs of the installs that have queued jobs,
// so their agents can be woken at start-up and after a sweep.
func (s *Store) QueuedJobInstalls(ctx context.Context) ([]string, error) {
	var ids []string
	if err := s.r.SelectContext(ctx, &ids, `SELECT DISTINCT install_id FROM jobs WHERE state = 'queued' ORDER BY install_id`); err != nil {
		return nil, fmt.Errorf("queued job installs: %w", err)
	}
	return ids, nil
}
