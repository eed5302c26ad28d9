package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
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
	var dropped int64
	err = s.write(ctx, "record offline step", func(tx *txn) (err error) {
		dropped, err = s.recordOfflineStep(ctx, tx, workflowID, name, j, config, agentID, r, logs, started, ended, false)
		return err
	})
	if err == nil {
		s.logDropped.Add(dropped)
	}
	return err
}

// recordOfflineStep is RecordOfflineStep's write, in tx. rerun records
// attempt 2 of a job the agent refused before (recorded so), in its row.
// It returns how many of logs the job's log cap dropped, for the caller
// to count (LogLinesDropped) once its transaction has committed.
func (s *Store) recordOfflineStep(ctx context.Context, tx *txn, workflowID, name string, j Job, config string, agentID string, r Result, logs []LogLine, started, ended time.Time, rerun bool) (int64, error) {
	res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'running', job_id = ?, attempts = attempts + 1,
		started_at = ?, ended_at = 0, error = '' WHERE workflow_id = ? AND name = ? AND state = 'pending'`),
		j.ID, nanos(started), workflowID, name)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err == nil {
			err = errs.E(errs.Conflict, "workflow %s: step %q is not pending", workflowID, name)
		}
		return 0, err
	}
	if err := s.Audit(ctx, tx, AuditEvent{Chain: j.InstallID, At: started, Kind: "step.started", Actor: "imsd", Subject: "workflow:" + workflowID + "/" + name,
		Data: map[string]string{"job": j.ID, "offline": "true"}}); err != nil {
		return 0, err
	}
	attempt := 1
	if rerun {
		// The refused attempt's row and logs stay as they were;
		// the re-run is attempt 2, whose lines the log retention
		// prunes in their turn.
		attempt = 2
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE jobs SET state = 'queued', agent_id = '', config = ?, logs_pruned_at = 0 WHERE id = ? AND state = 'refused'`), config, j.ID)
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = errs.E(errs.Conflict, "job %s was not refused", j.ID)
			}
			return 0, err
		}
	} else if err := s.insertQueued(ctx, tx, j, config); err != nil {
		return 0, err
	}
	var install, typ, op, release string
	err = tx.QueryRowContext(ctx, s.bind(`UPDATE jobs SET state = ?, agent_id = ?, attempt = ?, fencing_token = ?, started_at = ?, ended_at = ?,
		exit_code = ?, error = ?, outputs = ?, lease_deadline = 0 WHERE id = ? AND state = 'queued'
		RETURNING install_id, component_type, operation, release_id`),
		string(r.State), agentID, attempt, attempt, nanos(started), nanos(ended), r.ExitCode, r.Error, encodeMap(r.Outputs), j.ID).Scan(&install, &typ, &op, &release)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errs.E(errs.Conflict, "job %s is not queued", j.ID)
	}
	if err != nil {
		return 0, err
	}
	dropped, err := s.insertLogs(ctx, tx, j.ID, attempt, logs)
	if err != nil {
		return 0, err
	}
	return dropped, s.finished(ctx, tx, j.ID, Writer{AgentID: agentID, FencingToken: int64(attempt)}, r, "", install, typ, op, release, ended)
}

// OfflineWorkflow is an offline bundle's workflow as its agent ran it
// (byoc bundle import-results), for RecordOfflineWorkflow.
type OfflineWorkflow struct {
	// Workflow is created queued and started running with Steps.
	Workflow Workflow
	Steps    []Step
	AgentID  string
	// Ran are the steps the agent ran, in order.
	Ran []OfflineStep
	// NotRun are the steps it did not run: they end skipped, NotRunMsg
	// the reason.
	NotRun    []string
	NotRunMsg string
	// State ends the workflow (Msg its message), the install in
	// InstallState at the workflow's revision.
	State        WorkflowState
	Msg          string
	InstallState InstallState
	// Audit is the event that records the import, written last.
	Audit AuditEvent
	Now   time.Time
}

// OfflineStep is a step an agent ran offline: its job, how it ended, its
// log lines, and what the step leaves (RecordOfflineStep, FinishStep).
type OfflineStep struct {
	Name           string
	Job            Job
	Result         Result
	Logs           []LogLine
	Started, Ended time.Time
	StepState      StepState
	Msg            string
	Deployed       *InstallComponent
	Removed        string
	// LeftOut counts the lines of the step's log left out before it
	// came here (an imported results file's log is held to a live
	// batch's bounds): counted with the lines the cap drops
	// (LogLinesDropped) once the step is recorded.
	LeftOut int64
}

// RecordOfflineWorkflow records an offline bundle's workflow whole, in
// one transaction, or nothing: it is created and started, each step its
// agent ran recorded with its job and result (RecordOfflineStep) and
// finished (FinishStep), the others skipped, the workflow ended, and
// w.Audit written. A workflow of that id already is AlreadyExists; the
// install running another workflow is a Conflict. So the workflow engine
// never sees it half recorded (it would start its pending steps online),
// and an import that failed left nothing to take for a finished one.
func (s *Store) RecordOfflineWorkflow(ctx context.Context, w OfflineWorkflow) error {
	if err := checkWorkflow(w.Workflow); err != nil {
		return err
	}
	configs, err := offlineConfigs(w.Now, w.Ran, w.State)
	if err != nil {
		return err
	}
	id := w.Workflow.ID
	var dropped int64
	err = s.write(ctx, "record offline workflow", func(tx *txn) error {
		dropped = 0
		if err := s.insertWorkflow(ctx, tx, w.Workflow); err != nil {
			return err
		}
		ok, err := s.startWorkflow(ctx, tx, id, w.Steps, WorkflowRunning, []byte("{}"), w.Now)
		if err != nil {
			return err
		}
		if !ok {
			return errs.E(errs.Conflict, "install %s has a workflow running or awaiting approval", w.Workflow.InstallID)
		}
		for i, r := range w.Ran {
			n, err := s.recordOfflineStep(ctx, tx, id, r.Name, r.Job, configs[i], w.AgentID, r.Result, r.Logs, r.Started, r.Ended, false)
			if err != nil {
				return err
			}
			dropped += n + r.LeftOut
			if ok, err := s.finishStep(ctx, tx, id, r.Name, r.Job.ID, r.StepState, r.Msg, r.Deployed, r.Removed, r.Ended); err != nil {
				return err
			} else if !ok {
				return errs.E(errs.Conflict, "workflow %s: step %q is not running job %s", id, r.Name, r.Job.ID)
			}
		}
		if len(w.NotRun) > 0 {
			if err := s.endSteps(ctx, tx, id, w.NotRun, StepSkipped, w.NotRunMsg, w.Now); err != nil {
				return err
			}
		}
		if ok, err := s.endWorkflow(ctx, tx, id, w.State, w.Msg, w.InstallState, w.Workflow.AppRevision, nil, w.Now); err != nil {
			return err
		} else if !ok {
			return errs.E(errs.Conflict, "workflow %s did not end", id)
		}
		return s.Audit(ctx, tx, w.Audit)
	})
	if err == nil {
		s.logDropped.Add(dropped)
	}
	return err
}

// OfflineRerun is what a later results file of an offline bundle
// imported before adds (byoc bundle import-results): the steps its
// agent ran at a later import of the same bundle, for RecordOfflineRerun.
type OfflineRerun struct {
	WorkflowID string
	AgentID    string
	// Ran are the steps newly run, in order: each one imsd holds as not
	// run (skipped or cancelled, no job), or whose job the agent refused
	// (Rerun: the same job, run again).
	Ran   []OfflineStep
	Rerun map[string]bool
	// State ends the workflow again (Msg its message), the install in
	// InstallState at Revision.
	State        WorkflowState
	Msg          string
	InstallState InstallState
	Revision     int64
	Audit        AuditEvent
	Now          time.Time
}

// RecordOfflineRerun records, in one transaction or not at all, the
// steps an offline workflow's agent ran after the results imsd recorded
// (RecordOfflineWorkflow): the workflow, failed, runs again; each step
// of w.Ran goes back to pending and is recorded with its job and result
// (a refused job's row takes the re-run as attempt 2) and finished; the
// workflow ends again and w.Audit is written. The workflow must have
// failed, be the install's newest, and no other workflow of the install
// be active (Conflict otherwise); a step no longer as imsd held it is a
// Conflict too.
func (s *Store) RecordOfflineRerun(ctx context.Context, w OfflineRerun) error {
	configs, err := offlineConfigs(w.Now, w.Ran, w.State)
	if err != nil {
		return err
	}
	id := w.WorkflowID
	var dropped int64
	err = s.write(ctx, "record offline rerun", func(tx *txn) error {
		dropped = 0
		wf, err := s.workflowForWrite(ctx, tx, id)
		if err != nil {
			return err
		}
		if wf.State != WorkflowFailed {
			return errs.E(errs.Conflict, "workflow %s is %s, not failed", id, wf.State)
		}
		var newer string
		err = tx.GetContext(ctx, &newer, s.bind(`SELECT id FROM workflows WHERE install_id = ? AND id <> ?
			AND (created_at > ? OR state IN ('queued', `+strings.Trim(activeStates, "()")+`)) ORDER BY created_at DESC LIMIT 1`),
			wf.InstallID, id, nanos(wf.CreatedAt))
		if err == nil {
			return errs.E(errs.Conflict, "workflow %s of the same install came after %s", newer, id)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE workflows SET state = 'running', error = '', ended_at = 0 WHERE id = ?`), id); err != nil {
			return err
		}
		for i, r := range w.Ran {
			from := `state IN ('skipped', 'cancelled') AND job_id = ''`
			if w.Rerun[r.Name] {
				from = `state = 'failed' AND job_id = ?`
			}
			args := []any{id, r.Name}
			if w.Rerun[r.Name] {
				args = append(args, r.Job.ID)
			}
			res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'pending', error = '', ended_at = 0
				WHERE workflow_id = ? AND name = ? AND `+from), args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				if err == nil {
					err = errs.E(errs.Conflict, "workflow %s: step %q is no longer as imsd held it", id, r.Name)
				}
				return err
			}
			n, err := s.recordOfflineStep(ctx, tx, id, r.Name, r.Job, configs[i], w.AgentID, r.Result, r.Logs, r.Started, r.Ended, w.Rerun[r.Name])
			if err != nil {
				return err
			}
			dropped += n + r.LeftOut
			if ok, err := s.finishStep(ctx, tx, id, r.Name, r.Job.ID, r.StepState, r.Msg, r.Deployed, r.Removed, r.Ended); err != nil {
				return err
			} else if !ok {
				return errs.E(errs.Conflict, "workflow %s: step %q is not running job %s", id, r.Name, r.Job.ID)
			}
		}
		if ok, err := s.endWorkflow(ctx, tx, id, w.State, w.Msg, w.InstallState, w.Revision, nil, w.Now); err != nil {
			return err
		} else if !ok {
			return errs.E(errs.Conflict, "workflow %s did not end", id)
		}
		return s.Audit(ctx, tx, w.Audit)
	})
	if err == nil {
		s.logDropped.Add(dropped)
	}
	return err
}

// offlineConfigs checks what an offline workflow's agent ran (its steps,
// and the workflow's final state, recorded at now) and returns the steps'
// job configs, encoded.
func offlineConfigs(now time.Time, ran []OfflineStep, state WorkflowState) ([]string, error) {
	if err := requireTime("now", now); err != nil {
		return nil, err
	}
	if !state.Terminal() {
		return nil, errs.Field("state", "%q is not a final workflow state", state)
	}
	configs := make([]string, len(ran))
	for i, r := range ran {
		c, err := checkNewJob(r.Job)
		if err != nil {
			return nil, err
		}
		if !r.Result.State.Terminal() {
			return nil, errs.Field("state", "%q is not a final job state", r.Result.State)
		}
		if !r.StepState.Terminal() {
			return nil, errs.Field("state", "%q is not a final step state", r.StepState)
		}
		if err := requireTime("ended", r.Ended); err != nil {
			return nil, err
		}
		configs[i] = c
	}
	return configs, nil
}
