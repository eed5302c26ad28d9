package store

import (
	"context"
	"database/sql"
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

// WorkflowState is where a workflow is.
type WorkflowState string

// The workflow states.
const (
	WorkflowQueued           WorkflowState = "queued"
	WorkflowAwaitingApproval WorkflowState = "awaiting_approval"
	WorkflowRunning          WorkflowState = "running"
	WorkflowSucceeded        WorkflowState = "succeeded"
	WorkflowFailed           WorkflowState = "failed"
	WorkflowCancelled        WorkflowState = "cancelled"
)

// Terminal reports whether a workflow in state s has ended.
func (s WorkflowState) Terminal() bool {
	return s == WorkflowSucceeded || s == WorkflowFailed || s == WorkflowCancelled
}

// StepState is where a workflow step is.
type StepState string

// The step states.
const (
	StepPending   StepState = "pending"
	StepRunning   StepState = "running"
	StepSucceeded StepState = "succeeded"
	StepFailed    StepState = "failed"
	StepSkipped   StepState = "skipped"
	StepCancelled StepState = "cancelled"
)

// Terminal reports whether a step in state s has ended.
func (s StepState) Terminal() bool {
	return s != StepPending && s != StepRunning
}

// Workflow ties the jobs of one lifecycle change of one install together.
type Workflow struct {
	ID        string
	InstallID string
	// Kind is provision, update, deprovision or action.
	Kind string
	// Action, Trigger and Mode are set for an action run: the action, what
	// started it (manual, cron) and the permission mode it declares.
	Action, Trigger, Mode string
	State                 WorkflowState
	AppRevision           int64
	// Reason says why the workflow was started ("app push: revision 3").
	Reason string
	// Inputs are the resolved input values the plan was made with (JSON).
	Inputs          []byte
	Parallelism     int
	RequireApproval bool
	CancelRequested bool
	CancelReason    string
	ApprovedBy      string
	ApprovedAt      time.Time
	Error           string
	CreatedAt       time.Time
	CreatedBy       string
	StartedAt       time.Time
	EndedAt         time.Time
	// ReleaseID is the release the workflow rolls out, if any: its jobs
	// name it too.
	ReleaseID string
}

// Step is one job of a workflow.
type Step struct {
	WorkflowID string
	Name       string
	Position   int
	// Component is the component the step deploys or destroys; Action the
	// action it runs (a hook). One of them is set.
	Component     string
	Action        string
	ComponentType string
	Operation     string
	// Needs are the steps that must succeed before this one starts.
	Needs  []string
	Reason string
	// Config is the step's config before references are resolved (JSON).
	Config    []byte
	Timeout   time.Duration
	State     StepState
	JobID     string
	Attempts  int
	Error     string
	StartedAt time.Time
	EndedAt   time.Time
	// PlanJobID is the job whose plan is the step's (a plan job of a
	// workflow that requires approval, or an apply that found its plan
	// changed); PlanDigest is that plan's digest once it is in, and
	// ApprovedPlanDigest what the approval bound, which the step's apply
	// job carries.
	PlanJobID          string
	PlanDigest         string
	ApprovedPlanDigest string
}

// NeedsPlan reports whether a workflow that requires approval plans the
// step before it asks for approval: a component's apply.
func (st Step) NeedsPlan() bool {
	return st.Component != "" && (st.Operation == "apply" || st.Operation == "destroy")
}

// InstallComponent is what is deployed of one component in one install.
type InstallComponent struct {
	InstallID     string
	Name          string
	ComponentType string
	// Digest is the digest of Config, the rendered config last applied.
	Digest      string
	Config      []byte
	Outputs     map[string]string
	Needs       []string
	AppRevision int64
	WorkflowID  string
	JobID       string
	DeployedAt  time.Time
}

type workflowRow struct {
	ID              string `db:"id"`
	InstallID       string `db:"install_id"`
	Kind            string `db:"kind"`
	State           string `db:"state"`
	AppRevision     int64  `db:"app_revision"`
	Reason          string `db:"reason"`
	Inputs          string `db:"inputs"`
	Parallelism     int    `db:"parallelism"`
	RequireApproval bool   `db:"require_approval"`
	CancelRequested bool   `db:"cancel_requested"`
	CancelReason    string `db:"cancel_reason"`
	ApprovedBy      string `db:"approved_by"`
	ApprovedAt      int64  `db:"approved_at"`
	Error           string `db:"error"`
	CreatedAt       int64  `db:"created_at"`
	CreatedBy       string `db:"created_by"`
	StartedAt       int64  `db:"started_at"`
	EndedAt         int64  `db:"ended_at"`
	Action          string `db:"action"`
	Trigger         string `db:"triggered_by"`
	Mode            string `db:"mode"`
	ReleaseID       string `db:"release_id"`
}

const workflowCols = `id, install_id, kind, state, app_revision, reason, inputs, parallelism, require_approval,
	cancel_requested, cancel_reason, approved_by, approved_at, error, created_at, created_by, started_at, ended_at,
	action, triggered_by, mode, release_id`

func (r workflowRow) workflow() Workflow {
	return Workflow{ID: r.ID, InstallID: r.InstallID, Kind: r.Kind, State: WorkflowState(r.State), AppRevision: r.AppRevision,
		Reason: r.Reason, Inputs: []byte(r.Inputs), Parallelism: r.Parallelism, RequireApproval: r.RequireApproval,
		CancelRequested: r.CancelRequested, CancelReason: r.CancelReason, ApprovedBy: r.ApprovedBy, ApprovedAt: fromNanos(r.ApprovedAt),
		Error: r.Error, CreatedAt: fromNanos(r.CreatedAt), CreatedBy: r.CreatedBy, StartedAt: fromNanos(r.StartedAt), EndedAt: fromNanos(r.EndedAt),
		Action: r.Action, Trigger: r.Trigger, Mode: r.Mode, ReleaseID: r.ReleaseID}
}

type stepRow struct {
	WorkflowID    string `db:"workflow_id"`
	Name          string `db:"name"`
	Position      int    `db:"position"`
	Component     string `db:"component"`
	Action        string `db:"action"`
	ComponentType string `db:"component_type"`
	Operation     string `db:"operation"`
	Needs         string `db:"needs"`
	Reason        string `db:"reason"`
	Config        string `db:"config"`
	TimeoutNS     int64  `db:"timeout_ns"`
	State         string `db:"state"`
	JobID         string `db:"job_id"`
	Attempts      int    `db:"attempts"`
	Error         string `db:"error"`
	StartedAt     int64  `db:"started_at"`
	EndedAt       int64  `db:"ended_at"`
	PlanJobID     string `db:"plan_job_id"`
	PlanDigest    string `db:"plan_digest"`
	ApprovedPlan  string `db:"approved_plan_digest"`
}

const stepCols = `workflow_id, name, position, component, action, component_type, operation, needs, reason, config,
	timeout_ns, state, job_id, attempts, error, started_at, ended_at, plan_job_id, plan_digest, approved_plan_digest`

func (r stepRow) step() (Step, error) {
	st := Step{WorkflowID: r.WorkflowID, Name: r.Name, Position: r.Position, Component: r.Component, Action: r.Action,
		ComponentType: r.ComponentType, Operation: r.Operation, Reason: r.Reason, Config: []byte(r.Config),
		Timeout: time.Duration(r.TimeoutNS), State: StepState(r.State), JobID: r.JobID, Attempts: r.Attempts, Error: r.Error,
		StartedAt: fromNanos(r.StartedAt), EndedAt: fromNanos(r.EndedAt),
		PlanJobID: r.PlanJobID, PlanDigest: r.PlanDigest, ApprovedPlanDigest: r.ApprovedPlan}
	if err := json.Unmarshal([]byte(r.Needs), &st.Needs); err != nil {
		return Step{}, fmt.Errorf("workflow %s step %s needs: %w", r.WorkflowID, r.Name, err)
	}
	return st, nil
}

type installComponentRow struct {
	InstallID     string `db:"install_id"`
	Name          string `db:"name"`
	ComponentType string `db:"component_type"`
	Digest        string `db:"digest"`
	Config        string `db:"config"`
	Outputs       string `db:"outputs"`
	Needs         string `db:"needs"`
	AppRevision   int64  `db:"app_revision"`
	WorkflowID    string `db:"workflow_id"`
	JobID         string `db:"job_id"`
	DeployedAt    int64  `db:"deployed_at"`
}

const installComponentCols = `install_id, name, component_type, digest, config, outputs, needs, app_revision, workflow_id, job_id, deployed_at`

func encodeList(l []string) string {
	if l == nil {
		l = []string{}
	}
	b, _ := json.Marshal(l)
	return string(b)
}

// activeStates are the states in which a workflow holds its install.
const activeStates = `('awaiting_approval', 'running')`

// CreateWorkflow stores wf as queued. Its steps are written when it starts.
func (s *Store) CreateWorkflow(ctx context.Context, wf Workflow) error {
	if err := checkWorkflow(wf); err != nil {
		return err
	}
	return s.write(ctx, "create workflow", func(tx *txn) error { return s.insertWorkflow(ctx, tx, wf) })
}

func checkWorkflow(wf Workflow) error {
	switch {
	case wf.ID == "":
		return errs.Field("id", "required")
	case wf.InstallID == "":
		return errs.Field("install_id", "required")
	case wf.Kind == "":
		return errs.Field("kind", "required")
	case wf.Kind == "action" && wf.Action == "":
		return errs.Field("action", "required for an action run")
	case wf.Parallelism < 1:
		return errs.Field("parallelism", "must be at least 1, got %d", wf.Parallelism)
	}
	return requireTime("created_at", wf.CreatedAt)
}

func (s *Store) insertWorkflow(ctx context.Context, tx *txn, wf Workflow) error {
	inputs := string(wf.Inputs)
	if inputs == "" {
		inputs = "{}"
	}
	_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO workflows (id, install_id, kind, state, app_revision, reason, inputs,
		parallelism, require_approval, created_at, created_by, action, triggered_by, mode, release_id)
		VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		wf.ID, wf.InstallID, wf.Kind, wf.AppRevision, wf.Reason, inputs, wf.Parallelism, wf.RequireApproval, nanos(wf.CreatedAt), wf.CreatedBy,
		wf.Action, wf.Trigger, wf.Mode, wf.ReleaseID)
	switch {
	case isUnique(err):
		return errs.E(errs.AlreadyExists, "workflow %q already exists", wf.ID)
	case isForeignKey(err):
		return errs.E(errs.NotFound, "install %q not found", wf.InstallID)
	case err != nil:
		return err
	}
	data := map[string]string{"kind": wf.Kind, "action": wf.Action, "trigger": wf.Trigger, "mode": wf.Mode, "reason": truncate(wf.Reason, 512),
		"app_revision": strconv.FormatInt(wf.AppRevision, 10)}
	if wf.ReleaseID != "" {
		data["release"] = wf.ReleaseID
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: wf.InstallID, At: wf.CreatedAt, Kind: "workflow.created", Actor: wf.CreatedBy, Subject: "workflow:" + wf.ID,
		Data: data})
}

// GetWorkflow returns a workflow and its steps in plan order.
func (s *Store) GetWorkflow(ctx context.Context, id string) (Workflow, []Step, error) {
	var r workflowRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+workflowCols+` FROM workflows WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Workflow{}, nil, errs.E(errs.NotFound, "workflow %q not found", id)
	}
	if err != nil {
		return Workflow{}, nil, fmt.Errorf("get workflow %s: %w", id, err)
	}
	steps, err := s.workflowSteps(ctx, id)
	if err != nil {
		return Workflow{}, nil, err
	}
	return r.workflow(), steps, nil
}

func (s *Store) workflowSteps(ctx context.Context, id string) ([]Step, error) {
	var rows []stepRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+stepCols+` FROM workflow_steps WHERE workflow_id = ? ORDER BY position`), id); err != nil {
		return nil, fmt.Errorf("workflow %s steps: %w", id, err)
	}
	out := make([]Step, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = r.step(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WorkflowFilter selects workflows for ListWorkflows.
type WorkflowFilter struct {
	InstallID string
	// InstallIDs, when not nil, keeps only the workflows of these installs
	// (an empty list keeps none): what a label selector picked.
	InstallIDs []string
	// Active keeps only workflows that have not ended.
	Active bool
	// Limit is at most 1000; 0 means 100.
	Limit int
}

// ListWorkflows returns workflows, newest first.
func (s *Store) ListWorkflows(ctx context.Context, f WorkflowFilter) ([]Workflow, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, errs.Field("limit", "must be between 1 and 1000, got %d", limit)
	}
	// The install's condition only when there is one: SQLite cannot use
	// workflows_install for "(? = '' OR install_id = ?)", and a scan of
	// every workflow at each workflow's end made a release quadratic.
	q := `SELECT ` + workflowCols + ` FROM workflows WHERE 1 = 1`
	var args []any
	if f.InstallID != "" {
		q += ` AND install_id = ?`
		args = append(args, f.InstallID)
	}
	if f.InstallIDs != nil {
		if len(f.InstallIDs) == 0 {
			return nil, nil
		}
		q += ` AND install_id IN (` + placeholders(len(f.InstallIDs)) + `)`
		for _, id := range f.InstallIDs {
			args = append(args, id)
		}
	}
	if f.Active {
		q += ` AND state IN ('queued', 'awaiting_approval', 'running')`
	}
	q += fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT %d`, limit)
	var rows []workflowRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(q), args...); err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	out := make([]Workflow, len(rows))
	for i, r := range rows {
		out[i] = r.workflow()
	}
	return out, nil
}

// WorkflowsToAdvance returns the workflows that have something to do:
// queued ones, running ones, cancelled-but-not-ended ones, and those
// awaiting approval with a plan job to wait for, or a step still running
// (a step whose plan changed sent its workflow back; plan jobs are
// started in the pass that moves a workflow to awaiting approval); with
// onlyEnded, just the workflows with a running step whose job has ended,
// or a plan job that ended and is not recorded yet (what a job's end
// wakes).
func (s *Store) WorkflowsToAdvance(ctx context.Context, onlyEnded bool) ([]string, error) {
	q := `SELECT id FROM workflows WHERE state IN ('queued', 'running') OR (state = 'awaiting_approval' AND EXISTS (
			SELECT 1 FROM workflow_steps st WHERE st.workflow_id = workflows.id AND (st.state = 'running'
				OR (st.state = 'pending' AND st.plan_job_id <> '' AND st.plan_digest = ''))))
		ORDER BY created_at, id`
	if onlyEnded {
		q = `SELECT workflow_steps.workflow_id FROM workflow_steps JOIN jobs ON jobs.id = workflow_steps.job_id
			WHERE workflow_steps.state = 'running' AND jobs.state IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'refused')
			UNION SELECT workflow_steps.workflow_id FROM workflow_steps JOIN jobs ON jobs.id = workflow_steps.plan_job_id
			WHERE workflow_steps.plan_digest = '' AND workflow_steps.state = 'pending'
				AND jobs.state IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'refused')
			ORDER BY 1`
	}
	var ids []string
	if err := s.r.SelectContext(ctx, &ids, q); err != nil {
		return nil, fmt.Errorf("workflows to advance: %w", err)
	}
	return ids, nil
}

// StartWorkflow moves queued workflow id to state (running, or
// awaiting_approval) with its planned steps, unless another workflow of the
// install is awaiting approval or running: then it returns ok false and
// changes nothing. A provision or deprovision moves the install to
// provisioning or deprovisioning.
func (s *Store) StartWorkflow(ctx context.Context, id string, steps []Step, state WorkflowState, inputs []byte, now time.Time) (ok bool, err error) {
	if state != WorkflowRunning && state != WorkflowAwaitingApproval {
		return false, errs.Field("state", "a workflow starts running or awaiting approval, not %s", state)
	}
	if err := requireTime("now", now); err != nil {
		return false, err
	}
	err = s.write(ctx, "start workflow", func(tx *txn) error {
		var err error
		ok, err = s.startWorkflow(ctx, tx, id, steps, state, inputs, now)
		return err
	})
	return ok, err
}

// startWorkflow is StartWorkflow's write, in tx.
func (s *Store) startWorkflow(ctx context.Context, tx *txn, id string, steps []Step, state WorkflowState, inputs []byte, now time.Time) (ok bool, err error) {
	var wf workflowRow
	err = tx.GetContext(ctx, &wf, s.bind(`UPDATE workflows SET state = ?, started_at = ?, inputs = ?
		WHERE id = ? AND state = 'queued' AND NOT EXISTS (SELECT 1 FROM workflows o
			WHERE o.install_id = workflows.install_id AND o.id <> workflows.id AND o.state IN `+activeStates+`)
		RETURNING `+workflowCols), string(state), nanos(now), string(inputs), id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for i, st := range steps {
		if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO workflow_steps (workflow_id, name, position, component, action,
			component_type, operation, needs, reason, config, timeout_ns, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')`),
			id, st.Name, i, st.Component, st.Action, st.ComponentType, st.Operation, encodeList(st.Needs), st.Reason,
			string(st.Config), int64(st.Timeout)); err != nil {
			if isUnique(err) {
				return false, errs.E(errs.Invalid, "workflow %s: step %q is planned twice", id, st.Name)
			}
			return false, err
		}
	}
	switch wf.Kind {
	case "provision":
		err = s.setInstallState(ctx, tx, wf.InstallID, InstallProvisioning)
	case "deprovision":
		err = s.setInstallState(ctx, tx, wf.InstallID, InstallDeprovisioning)
	}
	if err != nil {
		return false, err
	}
	return true, s.Audit(ctx, tx, AuditEvent{Chain: wf.InstallID, At: now, Kind: "workflow.started", Actor: "imsd", Subject: "workflow:" + id,
		Data: map[string]string{"state": string(state), "steps": strconv.Itoa(len(steps))}})
}

func (s *Store) setInstallState(ctx context.Context, tx *txn, installID string, st InstallState) error {
	_, err := tx.ExecContext(ctx, s.bind(`UPDATE installs SET state = ? WHERE id = ?`), string(st), installID)
	return err
}

// StartStep moves a pending step of a running workflow to running and
// enqueues its job, in one transaction. ok is false (and nothing changes)
// when the step is no longer pending or the workflow is being cancelled,
// so two replicas advancing one workflow never start a step twice.
func (s *Store) StartStep(ctx context.Context, workflowID, name string, j Job, now time.Time) (ok bool, err error) {
	config, err := checkNewJob(j)
	if err != nil {
		return false, err
	}
	err = s.write(ctx, "start step", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'running', job_id = ?, attempts = attempts + 1,
			started_at = ?, ended_at = 0, error = '' WHERE workflow_id = ? AND name = ? AND state = 'pending'
			AND EXISTS (SELECT 1 FROM workflows WHERE id = ? AND state = 'running' AND cancel_requested = ?)`),
			j.ID, nanos(now), workflowID, name, workflowID, false)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		ok = true
		if err := s.Audit(ctx, tx, AuditEvent{Chain: j.InstallID, At: now, Kind: "step.started", Actor: "imsd", Subject: "workflow:" + workflowID + "/" + name,
			Data: map[string]string{"job": j.ID}}); err != nil {
			return err
		}
		return s.insertQueued(ctx, tx, j, config)
	})
	return ok, err
}

// FinishStep records how a running step's job ended: state is succeeded,
// failed or cancelled. For a succeeded deploy, deployed is what the install
// now runs of the component; for a succeeded destroy, removed names the
// component the install no longer has; both are written in the same
// transaction. ok is false when the step is not running job jobID.
func (s *Store) FinishStep(ctx context.Context, workflowID, name, jobID string, state StepState, msg string,
	deployed *InstallComponent, removed string, now time.Time) (ok bool, err error) {
	if !state.Terminal() {
		return false, errs.Field("state", "%q is not a final step state", state)
	}
	err = s.write(ctx, "finish step", func(tx *txn) error {
		var err error
		ok, err = s.finishStep(ctx, tx, workflowID, name, jobID, state, msg, deployed, removed, now)
		return err
	})
	return ok, err
}

// finishStep is FinishStep's write, in tx.
func (s *Store) finishStep(ctx context.Context, tx *txn, workflowID, name, jobID string, state StepState, msg string,
	deployed *InstallComponent, removed string, now time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = ?, error = ?, ended_at = ?
		WHERE workflow_id = ? AND name = ? AND state = 'running' AND job_id = ?`), string(state), msg, nanos(now), workflowID, name, jobID)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if deployed != nil {
		d := deployed
		_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO install_components (`+installComponentCols+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (install_id, name) DO UPDATE SET component_type = excluded.component_type, digest = excluded.digest,
				config = excluded.config, outputs = excluded.outputs, needs = excluded.needs, app_revision = excluded.app_revision,
				workflow_id = excluded.workflow_id, job_id = excluded.job_id, deployed_at = excluded.deployed_at`),
			d.InstallID, d.Name, d.ComponentType, d.Digest, string(d.Config), encodeMap(d.Outputs), encodeList(d.Needs),
			d.AppRevision, d.WorkflowID, d.JobID, nanos(d.DeployedAt))
		if err != nil {
			return false, err
		}
	}
	if removed != "" {
		_, err = tx.ExecContext(ctx, s.bind(`DELETE FROM install_components WHERE install_id = (SELECT install_id FROM workflows WHERE id = ?) AND name = ?`),
			workflowID, removed)
		if err != nil {
			return false, err
		}
	}
	return true, s.auditStep(ctx, tx, workflowID, name, now, map[string]string{"state": string(state), "job": jobID, "error": truncate(msg, 512)})
}

// EndSteps ends the pending steps named (state skipped, cancelled, or
// failed for a step that could not start) with the reason msg. Steps no longer pending are left as they are.
func (s *Store) EndSteps(ctx context.Context, workflowID string, names []string, state StepState, msg string, now time.Time) error {
	if len(names) == 0 {
		return nil
	}
	if state != StepSkipped && state != StepCancelled && state != StepFailed {
		return errs.Field("state", "pending steps end skipped, cancelled or failed, not %s", state)
	}
	return s.write(ctx, "end steps", func(tx *txn) error { return s.endSteps(ctx, tx, workflowID, names, state, msg, now) })
}

// endSteps is EndSteps's write, in tx.
func (s *Store) endSteps(ctx context.Context, tx *txn, workflowID string, names []string, state StepState, msg string, now time.Time) error {
	for _, n := range names {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = ?, error = ?, ended_at = ?
			WHERE workflow_id = ? AND name = ? AND state = 'pending'`), string(state), msg, nanos(now), workflowID, n)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k > 0 {
			if err := s.auditStep(ctx, tx, workflowID, n, now, map[string]string{"state": string(state), "error": truncate(msg, 512)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// EndWorkflow ends a workflow that has not ended yet and sets its
// install's state (and, when appRevision > 0, the revision the install has
// applied in full). ok is false when the workflow had already ended.
func (s *Store) EndWorkflow(ctx context.Context, id string, state WorkflowState, msg string, install InstallState, appRevision int64, now time.Time) (ok bool, err error) {
	if !state.Terminal() {
		return false, errs.Field("state", "%q is not a final workflow state", state)
	}
	err = s.write(ctx, "end workflow", func(tx *txn) error {
		var err error
		ok, err = s.endWorkflow(ctx, tx, id, state, msg, install, appRevision, nil, now)
		return err
	})
	return ok, err
}

// endWorkflow is EndWorkflow inside a write transaction; health, when not
// nil, is the install's health the workflow's end leaves.
func (s *Store) endWorkflow(ctx context.Context, tx *txn, id string, state WorkflowState, msg string, install InstallState, appRevision int64,
	health *InstallHealth, now time.Time) (bool, error) {
	var installID string
	err := tx.GetContext(ctx, &installID, s.bind(`UPDATE workflows SET state = ?, error = ?, ended_at = ?
		WHERE id = ? AND state IN ('queued', 'awaiting_approval', 'running') RETURNING install_id`), string(state), msg, nanos(now), id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// Steps that never started end with their workflow.
	if _, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'cancelled', error = ?, ended_at = ?
		WHERE workflow_id = ? AND state = 'pending'`), "workflow "+strings.ReplaceAll(string(state), "_", " "), nanos(now), id); err != nil {
		return false, err
	}
	if install != "" {
		if err := s.setInstallState(ctx, tx, installID, install); err != nil {
			return false, err
		}
	}
	if appRevision > 0 {
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE installs SET app_revision = ? WHERE id = ?`), appRevision, installID); err != nil {
			return false, err
		}
	}
	if health != nil {
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE installs SET health = ?, health_at = ?, health_error = ?, health_workflow_id = ?
			WHERE id = ?`), string(health.State), nanos(health.At), health.Error, health.WorkflowID, installID); err != nil {
			return false, err
		}
	}
	return true, s.Audit(ctx, tx, AuditEvent{Chain: installID, At: now, Kind: "workflow.ended", Actor: "imsd", Subject: "workflow:" + id,
		Data: map[string]string{"state": string(state), "error": truncate(msg, 512)}})
}

func (s *Store) workflowForWrite(ctx context.Context, tx *txn, id string) (Workflow, error) {
	var r workflowRow
	err := tx.GetContext(ctx, &r, s.bind(`SELECT `+workflowCols+` FROM workflows WHERE id = ?`+s.forUpdate()), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Workflow{}, errs.E(errs.NotFound, "workflow %q not found", id)
	}
	return r.workflow(), err
}

// RequestWorkflowCancel cancels a workflow: one that is queued or awaiting
// approval ends cancelled at once; a running one is marked, and its engine
// cancels the running jobs and ends it when they have stopped.
// by is who asked (a token's name), the audit record's actor.
func (s *Store) RequestWorkflowCancel(ctx context.Context, id, reason, by string, now time.Time) (Workflow, error) {
	var out Workflow
	err := s.write(ctx, "cancel workflow", func(tx *txn) error {
		wf, err := s.workflowForWrite(ctx, tx, id)
		if err != nil {
			return err
		}
		msg := "cancelled"
		if reason != "" {
			msg = "cancelled: " + reason
		}
		switch wf.State {
		case WorkflowCancelled:
		case WorkflowQueued, WorkflowAwaitingApproval:
			_, err = tx.ExecContext(ctx, s.bind(`UPDATE workflows SET state = 'cancelled', cancel_requested = ?, cancel_reason = ?, error = ?, ended_at = ?
				WHERE id = ?`), true, reason, msg, nanos(now), id)
			if err == nil {
				_, err = tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'cancelled', error = ?, ended_at = ?
					WHERE workflow_id = ? AND state = 'pending'`), msg, nanos(now), id)
			}
		case WorkflowRunning:
			_, err = tx.ExecContext(ctx, s.bind(`UPDATE workflows SET cancel_requested = ?, cancel_reason = ? WHERE id = ?`), true, reason, id)
		default:
			return errs.E(errs.Conflict, "workflow %s already %s", id, wf.State)
		}
		if err != nil {
			return err
		}
		if wf.State != WorkflowCancelled {
			if err := s.Audit(ctx, tx, AuditEvent{Chain: wf.InstallID, At: now, Kind: "workflow.cancel_requested", Actor: by, Subject: "workflow:" + id,
				Data: map[string]string{"reason": truncate(reason, 512)}}); err != nil {
				return err
			}
		}
		out, err = s.workflowForWrite(ctx, tx, id)
		return err
	})
	return out, err
}

// RetryStep runs a failed or cancelled step again: it and the steps
// skipped or cancelled because of it go back to pending, and an ended
// workflow runs again. The workflow must be the install's newest, and no
// other workflow of the install may be active.
func (s *Store) RetryStep(ctx context.Context, id, name string, now time.Time) (Workflow, error) {
	var out Workflow
	err := s.write(ctx, "retry step", func(tx *txn) error {
		wf, err := s.workflowForWrite(ctx, tx, id)
		if err != nil {
			return err
		}
		var st stepRow
		err = tx.GetContext(ctx, &st, s.bind(`SELECT `+stepCols+` FROM workflow_steps WHERE workflow_id = ? AND name = ?`), id, name)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "workflow %s has no step %q", id, name)
		}
		if err != nil {
			return err
		}
		switch StepState(st.State) {
		case StepFailed, StepCancelled, StepSkipped:
		default:
			return errs.E(errs.Conflict, "step %q of workflow %s is %s; only a failed, cancelled or skipped step can be retried", name, id, st.State)
		}
		switch wf.State {
		case WorkflowRunning:
			if wf.CancelRequested {
				return errs.E(errs.Conflict, "workflow %s is being cancelled", id)
			}
		case WorkflowFailed, WorkflowCancelled:
			var newer string
			err := tx.GetContext(ctx, &newer, s.bind(`SELECT id FROM workflows WHERE install_id = ? AND id <> ?
				AND (created_at > ? OR state IN ('queued', `+strings.Trim(activeStates, "()")+`)) ORDER BY created_at DESC LIMIT 1`),
				wf.InstallID, id, nanos(wf.CreatedAt))
			if err == nil {
				return errs.E(errs.Conflict, "workflow %s of the same install came after %s; retry there or start a new one", newer, id)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			err = nil
			if _, err := tx.ExecContext(ctx, s.bind(`UPDATE workflows SET state = 'running', error = '', ended_at = 0,
				cancel_requested = ?, cancel_reason = '' WHERE id = ?`), false, id); err != nil {
				return err
			}
			switch wf.Kind {
			case "provision":
				err = s.setInstallState(ctx, tx, wf.InstallID, InstallProvisioning)
			case "deprovision":
				err = s.setInstallState(ctx, tx, wf.InstallID, InstallDeprovisioning)
			}
			if err != nil {
				return err
			}
		default:
			return errs.E(errs.Conflict, "workflow %s is %s; steps can be retried once it runs or has ended", id, strings.ReplaceAll(string(wf.State), "_", " "))
		}
		// The step, and every step that did not run because of it (or
		// because the workflow ended), runs again.
		// A plan that never came in (its job failed) is made again.
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE workflow_steps SET state = 'pending', error = '', ended_at = 0,
			plan_job_id = CASE WHEN plan_digest = '' THEN '' ELSE plan_job_id END
			WHERE workflow_id = ? AND (name = ? OR state IN ('skipped', 'cancelled'))`), id, name); err != nil {
			return err
		}
		if err := s.Audit(ctx, tx, AuditEvent{Chain: wf.InstallID, At: now, Kind: "step.retried", Subject: "workflow:" + id + "/" + name}); err != nil {
			return err
		}
		out, err = s.workflowForWrite(ctx, tx, id)
		return err
	})
	return out, err
}

// InstallComponents returns what is deployed in an install, by name.
func (s *Store) InstallComponents(ctx context.Context, installID string) ([]InstallComponent, error) {
	var rows []installComponentRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+installComponentCols+` FROM install_components WHERE install_id = ? ORDER BY name`), installID); err != nil {
		return nil, fmt.Errorf("install %s components: %w", installID, err)
	}
	out := make([]InstallComponent, len(rows))
	for i, r := range rows {
		c := InstallComponent{InstallID: r.InstallID, Name: r.Name, ComponentType: r.ComponentType, Digest: r.Digest,
			Config: []byte(r.Config), AppRevision: r.AppRevision, WorkflowID: r.WorkflowID, JobID: r.JobID, DeployedAt: fromNanos(r.DeployedAt)}
		var err error
		if c.Outputs, err = decodeMap(r.Outputs); err != nil {
			return nil, fmt.Errorf("install %s component %s outputs: %w", installID, r.Name, err)
		}
		if err := json.Unmarshal([]byte(r.Needs), &c.Needs); err != nil {
			return nil, fmt.Errorf("install %s component %s needs: %w", installID, r.Name, err)
		}
		out[i] = c
	}
	return out, nil
}

// UpdateInstall replaces an install's inputs and settings.
func (s *Store) UpdateInstall(ctx context.Context, id string, inputs map[string]string, settings InstallSettings, now time.Time) (Install, error) {
	b, err := json.Marshal(settings)
	if err != nil {
		return Install{}, err
	}
	var out Install
	err = s.write(ctx, "update install", func(tx *txn) error {
		var r installRow
		err := tx.GetContext(ctx, &r, s.bind(`UPDATE installs SET inputs = ?, settings = ? WHERE id = ? RETURNING `+installCols),
			encodeMap(inputs), string(b), id)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "install %q not found", id)
		}
		if err != nil {
			return err
		}
		out, err = r.install()
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: out.ID, At: now, Kind: "install.updated", Subject: "install:" + out.Name,
			Data: map[string]string{"inputs": strings.Join(slices.Sorted(maps.Keys(inputs)), ","), "settings": string(b)}})
	})
	return out, err
}
