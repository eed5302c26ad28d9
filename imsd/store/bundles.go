package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// RecordOfflineStep records, in one transaction, a step of a running
// workflow whose job agent agentID ran offline, from an offline bundle
// (byoc bundle import-results): the step starts with job j, which ends at
// once with result r, as the agent's, attempt 1, between started and
// ended, with its log lines and the usual audit events. The job is never queued for an
// agent to claim. A step no longer pending is a Conflict.
func (s *Store) RecordOfflineStep(ctx context.Context, workflowID, name string, j Job, agentID string, r Result, logs []LogLine, started, ended time.Time) error {
	config, err := checkNewJob(j)
	if err != nil {
		return err
	}
	if !r.State.Terminal() {
		return errs.Field("state", "%q is not a final job state", r.State)
	}
	if err := requireTime("ended", ended); err != nil {
		return err
	}
	return s.write(ctx, "record offline step", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'running', job_id = ?, attempts = attempts + 1,
			started_at = ?, ended_at = 0, error = '' WHERE workflow_id = ? AND name = ? AND state = 'pending'`),
			j.ID, nanos(started), workflowID, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = errs.E(errs.Conflict, "workflow %s: step %q is not pending", workflowID, name)
			}
			return err
		}
		if err := s.Audit(ctx, tx, AuditEvent{Chain: j.InstallID, At: started, Kind: "step.started", Actor: "imsd", Subject: "workflow:" + workflowID + "/" + name,
			Data: map[string]string{"job": j.ID, "offline": "true"}}); err != nil {
			return err
		}
		if err := s.insertQueued(ctx, tx, j, config); err != nil {
			return err
		}
		var install, typ, op, release string
		err = tx.QueryRowContext(ctx, s.bind(`UPDATE jobs SET state = ?, agent_id = ?, attempt = 1, fencing_token = 1, started_at = ?, ended_at = ?,
			exit_code = ?, error = ?, outputs = ?, lease_deadline = 0 WHERE id = ? AND state = 'queued'
			RETURNING install_id, component_type, operation, release_id`),
			string(r.State), agentID, nanos(started), nanos(ended), r.ExitCode, r.Error, encodeMap(r.Outputs), j.ID).Scan(&install, &typ, &op, &release)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.Conflict, "job %s is not queued", j.ID)
		}
		if err != nil {
			return err
		}
		if err := s.insertLogs(ctx, tx, j.ID, 1, logs); err != nil {
			return err
		}
		return s.finished(ctx, tx, j.ID, Writer{AgentID: agentID, FencingToken: 1}, r, "", install, typ, op, release, ended)
	})
}
