// Jobs, enqueue: a new job is checked and enters the queue (EnqueueJob,
// EnqueueJobs) or goes straight to an agent (EnqueueAssigned).

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// EnqueueJob stores j as a queued job at attempt 0. The caller fills in
// the ID, CreatedAt and defaults; MaxAttempts must be at least 1 and
// Timeout positive. State, attempt, lease and result fields are ignored.
func (s *Store) EnqueueJob(ctx context.Context, j Job) error {
	config, err := checkNewJob(j)
	if err != nil {
		return err
	}
	call := takeCallRecord(ctx)
	err = s.writeOne(ctx, "enqueue job", func(tx *txn) error {
		if err := call.audit(ctx, s, tx); err != nil {
			return err
		}
		return s.insertQueued(ctx, tx, j, config)
	})
	call.done(err)
	return err
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
		max_attempts, timeout_ns, created_at, created_by, mode, component, approved_plan_digest, release_id, window_bound)
		VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		j.ID, j.InstallID, j.ComponentType, j.Operation, config, j.MaxAttempts, int64(j.Timeout), nanos(j.CreatedAt), j.CreatedBy, string(modeOf(j)),
		j.Component, j.ApprovedPlanDigest, j.ReleaseID, j.WindowBound)
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
// install from a cache: see docs/performance-store.md for why not INSERT ...
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
	call := takeCallRecord(ctx)
	err = s.writeOne(ctx, "enqueue job", func(tx *txn) error {
		if err := call.audit(ctx, s, tx); err != nil {
			return err
		}
		out, err = s.insertNew(ctx, tx, n, config)
		return err
	})
	call.done(err)
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
	call := takeCallRecord(ctx)
	err = s.writeMany(ctx, "enqueue jobs", func(tx *txn) error {
		if err := call.audit(ctx, s, tx); err != nil {
			return err
		}
		out, err = s.insertNewJobs(ctx, tx, jobs, configs)
		return err
	})
	call.done(err)
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
	if tx.pgb != nil && len(jobs) > 1 {
		// PostgreSQL's group commit: one INSERT (pgfast.go), else job
		// by job below, to name the one that failed.
		if out, handled, err := s.insertNewJobsPG(ctx, tx, jobs, configs); handled {
			return out, err
		}
	}
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
				attempt, max_attempts, timeout_ns, fencing_token, agent_id, lease_deadline, created_at, created_by, mode, component, window_bound)
				VALUES (?, ?, ?, ?, ?, 'assigned', 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				j.ID, j.InstallID, j.ComponentType, j.Operation, config, j.MaxAttempts, int64(j.Timeout), token,
				n.AgentID, nanos(n.LeaseUntil), nanos(j.CreatedAt), j.CreatedBy, string(j.Mode), j.Component, j.WindowBound)
			if err != nil {
				return Job{}, insertError(j, err)
			}
			j.State, j.Attempt, j.FencingToken, j.AgentID, j.LeaseDeadline = JobAssigned, 1, token, n.AgentID, n.LeaseUntil
			return j, s.Audit(ctx, tx, jobEvent(j, "job.assigned", j.CreatedBy, j.CreatedAt, map[string]string{"agent": n.AgentID, "attempt": "1"}))
		}
	}
	return j, s.insertQueued(ctx, tx, j, config)
}
