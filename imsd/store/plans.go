package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// Approved plans. A workflow that requires approval is planned for real
// before anyone approves it: each component apply step gets a plan job
// (StartStepPlan), whose digest is recorded when it ends (SetStepPlan).
// ApproveWorkflow binds every pending step's plan digest, and the step's
// apply job carries it (Job.ApprovedPlanDigest, signed for the agent). An
// apply whose fresh plan on the agent has another digest fails; ReplanStep
// then makes that plan the step's and sends the workflow back to awaiting
// approval.

// StartStepPlan enqueues j, the plan job of a pending step of a workflow
// awaiting approval, and records it as the step's plan job, in one
// transaction. ok is false (and nothing changes) when the step already
// has a plan job, is no longer pending or the workflow no longer awaits
// approval: two engines never plan a step twice.
func (s *Store) StartStepPlan(ctx context.Context, workflowID, name string, j Job, now time.Time) (ok bool, err error) {
	config, err := checkNewJob(j)
	if err != nil {
		return false, err
	}
	err = s.write(ctx, "start step plan", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET plan_job_id = ?, plan_digest = '', approved_plan_digest = ''
			WHERE workflow_id = ? AND name = ? AND state = 'pending' AND plan_job_id = ''
			AND EXISTS (SELECT 1 FROM workflows WHERE id = ? AND state = 'awaiting_approval')`), j.ID, workflowID, name, workflowID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		ok = true
		if err := s.Audit(ctx, tx, AuditEvent{Chain: j.InstallID, At: now, Kind: "step.plan_started", Actor: "imsd",
			Subject: "workflow:" + workflowID + "/" + name, Data: map[string]string{"job": j.ID}}); err != nil {
			return err
		}
		return s.insertQueued(ctx, tx, j, config)
	})
	return ok, err
}

// SetStepPlan records the digest of a step's plan, made by its plan job
// jobID. ok is false when the step's plan job is another or its plan is
// already recorded.
func (s *Store) SetStepPlan(ctx context.Context, workflowID, name, jobID, digest string, now time.Time) (ok bool, err error) {
	if digest == "" {
		return false, errs.Field("digest", "required")
	}
	err = s.write(ctx, "set step plan", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET plan_digest = ?
			WHERE workflow_id = ? AND name = ? AND plan_job_id = ? AND plan_digest = ''`), digest, workflowID, name, jobID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		ok = true
		return s.auditPlan(ctx, tx, workflowID, name, "step.planned", now, map[string]string{"job": jobID, "plan_digest": digest})
	})
	return ok, err
}

func (s *Store) auditPlan(ctx context.Context, tx *txn, workflowID, name, kind string, at time.Time, data map[string]string) error {
	var install string
	if err := tx.GetContext(ctx, &install, s.bind(`SELECT install_id FROM workflows WHERE id = ?`), workflowID); err != nil {
		return fmt.Errorf("audit step %s/%s: %w", workflowID, name, err)
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: install, At: at, Kind: kind, Actor: "imsd", Subject: "workflow:" + workflowID + "/" + name, Data: data})
}

// ReplanStep records that the apply job jobID of running step name found
// its plan changed since approval: the step goes back to pending with the
// fresh plan (made by jobID, digest digest) as its plan, every pending
// step's approval is withdrawn, and the workflow awaits approval again.
// ok is false (nothing changes) when the step is not running jobID or the
// workflow is not running or is being cancelled.
func (s *Store) ReplanStep(ctx context.Context, workflowID, name, jobID, approved, digest, msg string, now time.Time) (ok bool, err error) {
	if digest == "" {
		return false, errs.Field("digest", "required")
	}
	err = s.write(ctx, "replan step", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflows SET state = 'awaiting_approval', approved_by = '', approved_at = 0
			WHERE id = ? AND state = 'running' AND cancel_requested = ?`), workflowID, false)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		res, err = tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'pending', plan_job_id = ?, plan_digest = ?,
			approved_plan_digest = '', error = ?, ended_at = 0 WHERE workflow_id = ? AND name = ? AND state = 'running' AND job_id = ?`),
			jobID, digest, msg, workflowID, name, jobID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = errNoChange // undo the workflow's change
			}
			return err
		}
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET approved_plan_digest = ''
			WHERE workflow_id = ? AND state = 'pending'`), workflowID); err != nil {
			return err
		}
		ok = true
		return s.auditPlan(ctx, tx, workflowID, name, "workflow.plan_changed", now,
			map[string]string{"job": jobID, "approved_plan_digest": approved, "plan_digest": digest})
	})
	if errors.Is(err, errNoChange) {
		return false, nil
	}
	return ok, err
}

// AwaitApproval sends a running workflow back to awaiting approval, so
// that a step that could not be planned before is planned and approved
// now. ok is false when the workflow is not running or is being
// cancelled.
func (s *Store) AwaitApproval(ctx context.Context, id, reason string, now time.Time) (ok bool, err error) {
	err = s.write(ctx, "await approval", func(tx *txn) error {
		var install string
		err := tx.GetContext(ctx, &install, s.bind(`UPDATE workflows SET state = 'awaiting_approval', approved_by = '', approved_at = 0
			WHERE id = ? AND state = 'running' AND cancel_requested = ? RETURNING install_id`), id, false)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		return s.Audit(ctx, tx, AuditEvent{Chain: install, At: now, Kind: "workflow.awaiting_approval", Actor: "imsd", Subject: "workflow:" + id,
			Data: map[string]string{"reason": truncate(reason, 512)}})
	})
	return ok, err
}

// errNoChange rolls back a write that found nothing to do.
var errNoChange = errors.New("no change")

// ApproveWorkflow lets a workflow awaiting approval run, binding each
// pending step's plan that is in: its digest becomes the step's approved digest,
// which its apply job carries, and the approval's audit event lists them
// ("plans": "step=digest,..."). It is refused while a plan is still
// being made, and, when expected is not nil (step name -> the digest the
// approver saw), if any planned step's digest is not the one expected.
func (s *Store) ApproveWorkflow(ctx context.Context, id, by string, expected map[string]string, now time.Time) (Workflow, error) {
	var out Workflow
	err := s.write(ctx, "approve workflow", func(tx *txn) error {
		cur, err := s.workflowForWrite(ctx, tx, id)
		if err != nil {
			return err
		}
		if cur.State != WorkflowAwaitingApproval {
			return errs.E(errs.Conflict, "workflow %s is %s, not awaiting approval", id, strings.ReplaceAll(string(cur.State), "_", " "))
		}
		var rows []stepRow
		if err := tx.SelectContext(ctx, &rows, s.bind(`SELECT `+stepCols+` FROM workflow_steps WHERE workflow_id = ? ORDER BY position`), id); err != nil {
			return err
		}
		var planning, plans []string
		seen := map[string]bool{}
		for _, r := range rows {
			st, err := r.step()
			if err != nil {
				return err
			}
			// A step without a plan job has none to bind yet: it could
			// not be planned before the steps it needs run, and the
			// workflow asks again then.
			if st.State != StepPending || st.PlanJobID == "" {
				continue
			}
			if st.PlanDigest == "" {
				planning = append(planning, st.Name)
				continue
			}
			seen[st.Name] = true
			plans = append(plans, st.Name+"="+st.PlanDigest)
			if expected == nil {
				continue
			}
			if want, ok := expected[st.Name]; !ok {
				return errs.E(errs.Conflict, "step %s has a plan (%s) the approval does not name; look again (byoc workflow get %s)", st.Name, st.PlanDigest, id)
			} else if want != st.PlanDigest {
				return errs.E(errs.Conflict, "the plan of step %s changed since it was shown: approving %s, it is %s now; look again (byoc workflow get %s)",
					st.Name, want, st.PlanDigest, id)
			}
		}
		if len(planning) > 0 {
			return errs.E(errs.Conflict, "workflow %s is still planning %s; approve once every plan is in", id, strings.Join(planning, ", "))
		}
		for _, n := range slices.Sorted(maps.Keys(expected)) {
			if !seen[n] {
				return errs.Field("plan_digests", "step %q has no plan awaiting approval in workflow %s", n, id)
			}
		}
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET approved_plan_digest = plan_digest
			WHERE workflow_id = ? AND state = 'pending' AND plan_digest <> ''`), id); err != nil {
			return err
		}
		var r workflowRow
		err = tx.GetContext(ctx, &r, s.bind(`UPDATE workflows SET state = 'running', approved_by = ?, approved_at = ?
			WHERE id = ? AND state = 'awaiting_approval' RETURNING `+workflowCols), by, nanos(now), id)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.Conflict, "workflow %s is no longer awaiting approval", id)
		}
		if err != nil {
			return err
		}
		out = r.workflow()
		var data map[string]string
		if len(plans) > 0 {
			data = map[string]string{"plans": strings.Join(plans, ",")}
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: out.InstallID, At: now, Kind: "workflow.approved", Actor: by, Subject: "workflow:" + id, Data: data})
	})
	return out, err
}
