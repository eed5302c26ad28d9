// Jobs, finish and cancel: how a job ends, by its agent's result
// (FinishJob) or by an operator's cancel (RequestCancel).

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

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
	fn := func(tx *txn) error {
		changed = false // PostgreSQL's group commit may run it again
		// The usual case, one statement: the holder finishes its job. It
		// returns what the bookkeeping below needs, so a job that is no
		// drift check and no build costs no further statement.
		var install, typ, op, release string
		err := tx.QueryRowContext(ctx, s.bind(`UPDATE jobs SET state = ?, ended_at = ?, exit_code = ?, error = ?, outputs = ?, plan = ?, policy = ?,
			plan_digest = ?, lease_deadline = 0 WHERE id = ? AND agent_id = ? AND agent_id <> '' AND fencing_token = ? AND state IN ('assigned', 'running')
			RETURNING install_id, component_type, operation, release_id`),
			string(r.State), nanos(now), r.ExitCode, r.Error, encodeMap(r.Outputs), plan, policy, r.PlanDigest, jobID, w.AgentID, w.FencingToken).
			Scan(&install, &typ, &op, &release)
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
			install, typ, op, release = j.InstallID, j.ComponentType, j.Operation, j.ReleaseID
		}
		changed = true
		return s.finished(ctx, tx, jobID, w, r, plan, install, typ, op, release, now)
	}
	if s.pgc != nil && r.Build == nil {
		p := &pgPre{finish: true, jobID: jobID, w: w, now: nanos(now), state: string(r.State), exitCode: r.ExitCode, errMsg: r.Error,
			outputs: encodeMap(r.Outputs), plan: plan, policy: policy, planDigest: r.PlanDigest}
		p.after = func(tx *txn) error {
			changed = true
			return s.finished(ctx, tx, jobID, w, r, plan, p.install, p.typ, p.op, p.release, now)
		}
		err = s.writePre(ctx, "finish job", p, fn)
	} else {
		err = write(ctx, "finish job", fn)
	}
	return changed && err == nil, err
}

// finished is the bookkeeping of a job that FinishJob has just ended: its
// audit event, its drift record or build, and the wake-up of its log's
// followers. install, typ, op and release (its release, if any) are the
// job's.
func (s *Store) finished(ctx context.Context, tx *txn, jobID string, w Writer, r Result, plan, install, typ, op, release string, now time.Time) error {
	var err error
	data := map[string]string{"state": string(r.State), "exit_code": strconv.Itoa(r.ExitCode)}
	if r.Error != "" {
		data["error"] = truncate(r.Error, 512)
	}
	if r.PlanDigest != "" {
		data["plan_digest"] = r.PlanDigest
	}
	if release != "" {
		data["release"] = release
	}
	policyAudit(data, r.PolicyFindings)
	if err := s.recordVerifications(ctx, tx, jobID, install, r.Verifications, now, data); err != nil {
		return err
	}
	kind := "job.finished"
	if r.State == JobRefused {
		// The agent refused the job (its check of the assignment, or
		// the customer's permission state): a kind of its own.
		kind = "job.refused"
	}
	if r.ByIMSD {
		data["agent"] = w.AgentID
		err = s.Audit(ctx, tx, AuditEvent{Chain: install, At: now, Kind: kind, Actor: "imsd", Subject: "job:" + jobID, Data: data})
	} else {
		err = s.auditAgentJob(ctx, tx, w.AgentID, jobID, kind, now, data)
	}
	if err != nil {
		return err
	}
	if op == "drift" {
		if err := s.recordDrift(ctx, tx, jobID, r, plan, now); err != nil {
			return err
		}
	}
	if op == OpImport && r.State == JobSucceeded {
		if err := s.recordImport(ctx, tx, jobID, r, now); err != nil {
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
