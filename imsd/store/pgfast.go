package store

import (
	"context"
	"fmt"
	"time"
)

// The job hot path's statements on PostgreSQL, one per batch instead of
// one per write (docs/performance-postgres.md): the usual
// ack and the usual finish of every write in a group-commit batch are one
// UPDATE ... FROM unnest(...) each, and an EnqueueJobs is one INSERT ...
// SELECT FROM unnest(...). What the one statement does not cover (a
// resent ack, a stale token, a job whose finish needs more) runs the
// write's own function, as on SQLite.

// pgPre is the usual case of a batched ack or finish, run for the whole
// batch in one statement before the batch's writes (pgGroupCommit.pres).
// When the statement changed the write's job (ok), after does the rest
// of the write instead of its function.
type pgPre struct {
	finish bool
	jobID  string
	w      Writer
	now    int64
	lease  int64 // ack
	// finish
	state                                     string
	exitCode                                  int
	errMsg, outputs, plan, policy, planDigest string
	// Set by the statement: the write changed its job, and (finish) the
	// job's install, type and operation.
	ok            bool
	install, typ  string
	op, release   string
	after         func(tx *txn) error
	disabled, dup bool
}

// pgAckPre is AckJob's usual case, one UPDATE for the batch.
//
// The state the job must be in comes from the unnest (v.was, 'assigned'
// in every row), not from a constant: jobs.state = 'assigned' alone is a
// condition the index on state (jobs_state_unsucceeded) can answer, and
// PostgreSQL then read every assigned job of the table, and every dead
// index entry that a bitmap scan never removes (every job ever assigned
// since the last vacuum), to hash-join them with the batch. Compared
// with a column of the batch it is a join condition, and each job is
// found by its primary key.
const pgAckSQL = `UPDATE jobs SET state = 'running', started_at = v.now, lease_deadline = v.lease
	FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[], array_fill('assigned'::TEXT, ARRAY[cardinality($1::TEXT[])]))
		AS v(id, agent, token, now, lease, was)
	WHERE jobs.id = v.id AND jobs.agent_id = v.agent AND jobs.agent_id <> '' AND jobs.fencing_token = v.token AND jobs.state = v.was
	RETURNING jobs.id`

// pgFinishSQL is FinishJob's usual case, one UPDATE for the batch. The
// states the job may be in come from the unnest, as in pgAckSQL.
const pgFinishSQL = `UPDATE jobs SET state = v.state, ended_at = v.now, exit_code = v.exit_code, error = v.error, outputs = v.outputs,
		plan = v.plan, policy = v.policy, plan_digest = v.plan_digest, lease_deadline = 0
	FROM unnest($1::TEXT[], $2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::BIGINT[], $6::INTEGER[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::TEXT[],
			array_fill('assigned'::TEXT, ARRAY[cardinality($1::TEXT[])]), array_fill('running'::TEXT, ARRAY[cardinality($1::TEXT[])]))
		AS v(id, agent, token, state, now, exit_code, error, outputs, plan, policy, plan_digest, assigned, running)
	WHERE jobs.id = v.id AND jobs.agent_id = v.agent AND jobs.agent_id <> '' AND jobs.fencing_token = v.token AND jobs.state IN (v.assigned, v.running)
	RETURNING jobs.id, jobs.install_id, jobs.component_type, jobs.operation, jobs.release_id`

// pres runs the usual case of the batch's acks and finishes, one
// statement each, and marks the writes it covered.
func (g *pgGroupCommit) pres(t *txn, batch []*writeReq) error {
	var acks, fins []*pgPre
	seen := map[string]bool{}
	for _, r := range batch {
		p := r.pre
		if p == nil {
			continue
		}
		p.ok, p.dup = false, false
		if p.disabled || r.ctx.Err() != nil {
			continue
		}
		if seen[p.jobID] {
			// A second write of the same job in the batch runs its own
			// function, after the first.
			p.dup = true
			continue
		}
		seen[p.jobID] = true
		if p.finish {
			fins = append(fins, p)
		} else {
			acks = append(acks, p)
		}
	}
	byID := func(ps []*pgPre) map[string]*pgPre {
		m := make(map[string]*pgPre, len(ps))
		for _, p := range ps {
			m[p.jobID] = p
		}
		return m
	}
	if len(acks) > 0 {
		n := len(acks)
		ids, agents := make([]string, n), make([]string, n)
		tokens, nows, leases := make([]int64, n), make([]int64, n), make([]int64, n)
		for i, p := range acks {
			ids[i], agents[i], tokens[i], nows[i], leases[i] = p.jobID, p.w.AgentID, p.w.FencingToken, p.now, p.lease
		}
		rows, err := t.tx.QueryContext(t.ctx, pgAckSQL, pgTexts(ids), pgTexts(agents), pgInt8s(tokens), pgInt8s(nows), pgInt8s(leases))
		if err != nil {
			return fmt.Errorf("ack %d jobs: %w", n, err)
		}
		m := byID(acks)
		var id string // declared once: Scan's &id escapes
		for rows.Next() {
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("ack %d jobs: %w", n, err)
			}
			if p := m[id]; p != nil {
				p.ok = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("ack %d jobs: %w", n, err)
		}
	}
	if len(fins) > 0 {
		n := len(fins)
		ids, agents, states, errors, outputs, plans, policies, digests := make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		tokens, nows, exits := make([]int64, n), make([]int64, n), make([]int32, n)
		for i, p := range fins {
			ids[i], agents[i], tokens[i], states[i], nows[i], exits[i] = p.jobID, p.w.AgentID, p.w.FencingToken, p.state, p.now, int32(p.exitCode)
			errors[i], outputs[i], plans[i], policies[i], digests[i] = p.errMsg, p.outputs, p.plan, p.policy, p.planDigest
		}
		rows, err := t.tx.QueryContext(t.ctx, pgFinishSQL, pgTexts(ids), pgTexts(agents), pgInt8s(tokens), pgTexts(states), pgInt8s(nows), exits,
			pgTexts(errors), pgTexts(outputs), pgTexts(plans), pgTexts(policies), pgTexts(digests))
		if err != nil {
			return fmt.Errorf("finish %d jobs: %w", n, err)
		}
		m := byID(fins)
		var id, install, typ, op, release string // declared once: Scan's pointers escape
		for rows.Next() {
			if err := rows.Scan(&id, &install, &typ, &op, &release); err != nil {
				rows.Close()
				return fmt.Errorf("finish %d jobs: %w", n, err)
			}
			if p := m[id]; p != nil {
				p.ok, p.install, p.typ, p.op, p.release = true, install, typ, op, release
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("finish %d jobs: %w", n, err)
		}
	}
	return nil
}

// writePre is writeOne for an ack or a finish whose usual case p covers.
func (s *Store) writePre(ctx context.Context, op string, p *pgPre, fn func(tx *txn) error) error {
	fn = s.withAudit(fn)
	p.after = s.withAudit(p.after)
	r := &writeReq{ctx: ctx, op: op, fn: fn, one: true, pre: p, err: make(chan error, 1)}
	return s.pgc.send(r)
}

// ackPre is AckJob's usual case for the PostgreSQL group commit.
func (s *Store) ackPre(ctx context.Context, jobID string, w Writer, leaseUntil, now time.Time) *pgPre {
	p := &pgPre{jobID: jobID, w: w, now: nanos(now), lease: nanos(leaseUntil)}
	p.after = func(tx *txn) error {
		return s.auditAgentJob(ctx, tx, w.AgentID, jobID, "job.acked", now, ackData(w))
	}
	return p
}

// insertNewJobsPG is insertNewJobs in one INSERT, in a savepoint: when
// it fails (a duplicate id, an unknown install) it is undone and handled
// is false, and the caller inserts job by job, which names the job.
func (s *Store) insertNewJobsPG(ctx context.Context, tx *txn, jobs []NewJob, configs []string) (out []Job, handled bool, err error) {
	n := len(jobs)
	out = make([]Job, n)
	ids, installs, types, ops, cfgs, states, agents, bys, modes, comps, digests := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, maxAttempts := make([]int32, n), make([]int32, n)
	timeouts, tokens, leases, created := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	releases, windowBound := make([]string, n), make([]bool, n)
	for i, nj := range jobs {
		j := nj.Job
		j.Config = []byte(configs[i])
		j.Mode = modeOf(j)
		j.State, j.Attempt, j.CancelRequested, j.CancelReason = JobQueued, 0, false, ""
		j.FencingToken, j.AgentID, j.LeaseDeadline = 0, "", time.Time{}
		j.StartedAt, j.EndedAt, j.ExitCode, j.Error, j.Outputs = time.Time{}, time.Time{}, 0, "", nil
		digests[i] = j.ApprovedPlanDigest
		if nj.AgentID != "" {
			install, err := s.agentInstall(ctx, tx, nj.AgentID)
			if err != nil {
				return nil, true, err
			}
			if install == j.InstallID {
				// As insertNew's assigned INSERT, which stores no
				// approved plan digest.
				j.State, j.Attempt, j.FencingToken, j.AgentID, j.LeaseDeadline = JobAssigned, 1, newFencingToken(), nj.AgentID, nj.LeaseUntil
				digests[i] = ""
			}
		}
		out[i] = j
		ids[i], installs[i], types[i], ops[i], cfgs[i], states[i] = j.ID, j.InstallID, j.ComponentType, j.Operation, configs[i], string(j.State)
		attempts[i], maxAttempts[i], timeouts[i], tokens[i], agents[i] = int32(j.Attempt), int32(j.MaxAttempts), int64(j.Timeout), j.FencingToken, j.AgentID
		leases[i], created[i], bys[i], modes[i], comps[i] = nanos(j.LeaseDeadline), nanos(j.CreatedAt), j.CreatedBy, string(j.Mode), j.Component
		releases[i], windowBound[i] = j.ReleaseID, j.WindowBound
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT enqueue`); err != nil {
		return nil, true, err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO jobs (id, install_id, component_type, operation, config, state, attempt, max_attempts, timeout_ns,
			fencing_token, agent_id, lease_deadline, created_at, created_by, mode, component, approved_plan_digest, release_id, window_bound)
		SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::INTEGER[], $8::INTEGER[], $9::BIGINT[],
			$10::BIGINT[], $11::TEXT[], $12::BIGINT[], $13::BIGINT[], $14::TEXT[], $15::TEXT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::BOOLEAN[])`,
		pgTexts(ids), pgTexts(installs), pgTexts(types), pgTexts(ops), pgTexts(cfgs), pgTexts(states), attempts, maxAttempts,
		pgInt8s(timeouts), pgInt8s(tokens), pgTexts(agents), pgInt8s(leases), pgInt8s(created), pgTexts(bys), pgTexts(modes),
		pgTexts(comps), pgTexts(digests), pgTexts(releases), windowBound)
	if err != nil {
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT enqueue`); rerr != nil {
			return nil, true, fmt.Errorf("%w (and undoing it: %v)", err, rerr)
		}
		return nil, false, nil
	}
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT enqueue`); err != nil {
		return nil, true, err
	}
	for i, j := range out {
		var ev AuditEvent
		if j.State == JobAssigned {
			ev = jobEvent(j, "job.assigned", j.CreatedBy, j.CreatedAt, map[string]string{"agent": j.AgentID, "attempt": "1"})
		} else {
			var data map[string]string
			if digests[i] != "" {
				data = map[string]string{"approved_plan_digest": digests[i]}
			}
			ev = jobEvent(j, "job.queued", j.CreatedBy, j.CreatedAt, data)
		}
		if err := s.Audit(ctx, tx, ev); err != nil {
			return nil, true, err
		}
		if j.State == JobQueued {
			if err := s.notifyJobs(ctx, tx, j.InstallID); err != nil {
				return nil, true, err
			}
		}
	}
	return out, true, nil
}
