// Jobs, lease: an agent claims queued jobs (ClaimJobs), acknowledges them
// (AckJob) and renews its leases (RenewLeases); the sweeper requeues, fails
// or times out the jobs whose lease ran out (ExpireLeases).

package store

import (
	"context"
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

// ClaimJobs hands up to n of the oldest queued jobs of an install to agent
// w.AgentID: each becomes assigned, at the next attempt, with a new fencing
// token and a lease until leaseUntil. It returns the claimed jobs, oldest
// first. Concurrent claimers, in this process or in other replicas on the
// same PostgreSQL, never get the same job.
func (s *Store) ClaimJobs(ctx context.Context, installID string, w Writer, n int, leaseUntil, now time.Time) ([]Job, error) {
	return s.ClaimJobsHolding(ctx, installID, w, n, leaseUntil, now, false)
}

// ClaimJobsHolding is ClaimJobs that, with holdWindowBound, passes over
// window-bound jobs (they stay queued, in their order): what imsd does
// while an install's maintenance windows are closed.
func (s *Store) ClaimJobsHolding(ctx context.Context, installID string, w Writer, n int, leaseUntil, now time.Time, holdWindowBound bool) ([]Job, error) {
	hold := ""
	if holdWindowBound {
		hold = " AND window_bound = FALSE"
	}
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
				      FROM (SELECT id, created_at FROM jobs WHERE install_id = $4 AND `+s.phaseIs(JobQueued)+`state = 'queued'`+hold+`
				            ORDER BY created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) q) c
				WHERE jobs.id = c.id AND jobs.state = 'queued' RETURNING `+jobColsQualified,
				w.AgentID, nanos(leaseUntil), pgInt8s(tokens), installID, n)
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
			WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_queued WHERE install_id = ? AND state = 'queued'`+hold+` ORDER BY created_at, id LIMIT `+strconv.Itoa(n)+`)
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

// AckJob records that the agent started job jobID: assigned becomes
// running and the lease is renewed until leaseUntil. Acking a running job
// again with the same token changes nothing. Callers that want the job
// read it: the usual ack is one UPDATE that returns nothing, since
// returning the row cost as much as the update itself.
func (s *Store) AckJob(ctx context.Context, jobID string, w Writer, leaseUntil, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	fn := func(tx *txn) error {
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
	}
	if s.pgc != nil {
		return s.writePre(ctx, "ack job", s.ackPre(ctx, jobID, w, leaseUntil, now), fn)
	}
	return s.writeOne(ctx, "ack job", fn)
}

// ackData is a job.acked record's data: the fencing token the agent acked
// under, by which the agent finds the record in its copy of the chain
// before it starts the attempt.
func ackData(w Writer) map[string]string {
	return map[string]string{"token": strconv.FormatInt(w.FencingToken, 10)}
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
			WHERE `+s.phaseIs(JobAssigned, JobRunning)+`((state IN ('assigned', 'running') AND lease_deadline < ?)
			   OR (state = 'running' AND started_at < ? - timeout_ns))
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
	if err := s.r.SelectContext(ctx, &ids, `SELECT DISTINCT install_id FROM jobs WHERE `+s.phaseIs(JobQueued)+`state = 'queued' ORDER BY install_id`); err != nil {
		return nil, fmt.Errorf("queued job installs: %w", err)
	}
	return ids, nil
}
