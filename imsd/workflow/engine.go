package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/template"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// MaxJobAttempts is how many times a step's job is handed to an agent when
// leases run out (an agent that died); a job that fails is not retried by
// itself: the operator retries the step.
const MaxJobAttempts = 3

// Engine runs workflows. All state is in the store: the engine can stop at
// any point and a new one (after a restart, or on another replica) picks
// up where it was. Every change is a conditional write, so two engines
// advancing one workflow never start a step twice.
type Engine struct {
	st  *store.Store
	hub *dispatch.Hub
	now func() time.Time
	log *slog.Logger
	// Sensitive holds debug jobs' sensitive argument values (sensitive.go).
	Sensitive *SensitiveValues
	// Interval is how often every unfinished workflow is looked at even
	// without a signal (other replicas, lost signals). Set before Run.
	Interval time.Duration

	// nextFull is when Run may next look at every unfinished workflow.
	nextFull time.Time

	mu     sync.Mutex
	kicked map[string]bool
	wake   chan struct{}
	apps   appCache
	// schemaCache holds compiled component config schemas (schemas.go).
	schemaCache schemaCache
}

// WakeInstall wakes the agents of install id for a job queued outside a
// workflow (a drift check).
func (e *Engine) WakeInstall(id string) { e.hub.Wake(id) }

// NewEngine returns an engine over st. hub signals job ends.
func NewEngine(st *store.Store, hub *dispatch.Hub, now func() time.Time, log *slog.Logger) *Engine {
	return &Engine{st: st, hub: hub, now: now, log: log, Interval: 2 * time.Second, Sensitive: &SensitiveValues{},
		kicked: map[string]bool{}, wake: make(chan struct{}, 1), apps: appCache{m: map[string]*config.App{}}}
}

// Kick asks the engine to look at workflow id soon.
func (e *Engine) Kick(id string) {
	e.mu.Lock()
	e.kicked[id] = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run advances workflows until ctx ends: those kicked, those with a step
// whose job ended (woken by the hub), and every unfinished one each
// Interval and at start (which is how a restart resumes). The hub's signal
// fires at every job change in the fleet; while the last full pass found
// no unfinished workflow and nothing was kicked since, Run ignores it,
// since no step can have ended: a busy fleet running ad-hoc jobs would
// otherwise cost a query per signal.
func (e *Engine) Run(ctx context.Context) {
	t := time.NewTicker(e.Interval)
	defer t.Stop()
	// A full pass over every unfinished workflow is a safety net (other
	// replicas, lost signals); with thousands of workflows running (a
	// release's last wave) one takes seconds, and back to back they would
	// starve the passes that signals and kicks start. So the next full
	// pass waits at least five times as long as the last one took.
	full := func() bool {
		start := time.Now()
		found := e.advanceAll(ctx, false)
		e.nextFull = start.Add(max(e.Interval, 5*time.Since(start)))
		return found
	}
	sig := e.hub.FleetSignal()
	active := full()
	// A pass woken by the signal reads every running step whose job
	// ended; with thousands running, back to back they would take the
	// whole machine. The next one waits four times as long as the last
	// took (nothing for a small fleet's passes of microseconds; a few
	// tens of milliseconds in a release's last wave): the signal's
	// channel is taken before the pass, so no change is missed.
	var gap <-chan time.Time
	for {
		var signal <-chan struct{}
		if active && gap == nil {
			signal = sig
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
			active = true
			e.mu.Lock()
			ids := slices.Sorted(maps.Keys(e.kicked))
			clear(e.kicked)
			e.mu.Unlock()
			for _, id := range ids {
				e.advanceLogged(ctx, id)
			}
		case <-signal:
			sig = e.hub.FleetSignal()
			start := time.Now()
			e.advanceAll(ctx, true)
			if d := 4 * time.Since(start); d > time.Millisecond {
				gap = time.After(min(d, time.Second))
			}
		case <-gap:
			gap = nil
		case <-t.C:
			if !time.Now().Before(e.nextFull) {
				sig = e.hub.FleetSignal()
				active = full()
			}
		}
	}
}

// advanceAll advances the unfinished workflows (onlyEnded: those with a
// step whose job ended). It reports whether it found any, or failed to
// look.
func (e *Engine) advanceAll(ctx context.Context, onlyEnded bool) bool {
	ids, err := e.st.WorkflowsToAdvance(ctx, onlyEnded)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error("workflows to advance", "err", err)
		}
		return true
	}
	for _, id := range ids {
		e.advanceLogged(ctx, id)
	}
	return len(ids) > 0
}

func (e *Engine) advanceLogged(ctx context.Context, id string) {
	if err := e.Advance(ctx, id); err != nil && ctx.Err() == nil {
		e.log.Error("advance workflow", "workflow", id, "err", err)
	}
}

// Advance does what workflow id can do now: plan and start it when it is
// queued and its install is free, record the steps whose jobs ended, skip
// the steps behind a failure, start the steps that are ready, and end it
// when nothing is left. It is idempotent.
func (e *Engine) Advance(ctx context.Context, id string) error {
	for range 100 {
		wf, steps, err := e.st.GetWorkflow(ctx, id)
		if err != nil {
			return err
		}
		var again bool
		switch wf.State {
		case store.WorkflowQueued:
			again, err = e.start(ctx, wf)
		case store.WorkflowRunning:
			again, err = e.run(ctx, wf, steps)
		case store.WorkflowAwaitingApproval:
			again, err = e.planSteps(ctx, wf, steps)
		}
		if err != nil || !again {
			return err
		}
	}
	return nil
}

// app returns the parsed app revision.
func (e *Engine) app(ctx context.Context, appID string, rev int64) (*config.App, error) {
	return e.apps.get(ctx, e.st, appID, rev)
}

// PlanFor plans a workflow of kind for install in at revision rev (0: the
// app's latest), with inputs replacing the install's when not nil.
func (e *Engine) PlanFor(ctx context.Context, kind string, in store.Install, rev int64, inputs map[string]string) (*Plan, error) {
	return e.plan(ctx, kind, "", in, rev, inputs)
}

func (e *Engine) plan(ctx context.Context, kind, action string, in store.Install, rev int64, inputs map[string]string) (*Plan, error) {
	if rev == 0 {
		revs, err := e.st.ListAppRevisions(ctx, in.AppID)
		if err != nil {
			return nil, err
		}
		if len(revs) == 0 {
			return nil, errs.E(errs.Conflict, "the app of install %s has no revision yet (byoc app push DIR creates one)", in.Name)
		}
		rev = revs[0].Number
	}
	app, err := e.app(ctx, in.AppID, rev)
	if err != nil {
		return nil, err
	}
	deployed, err := e.st.InstallComponents(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	schemas, err := e.schemas(ctx)
	if err != nil {
		return nil, err
	}
	return Make(kind, Target{App: app, Revision: rev, Install: in, Inputs: inputs, Action: action, Schemas: schemas}, deployed)
}

// start plans a queued workflow and moves it to running (or awaiting
// approval) if its install has no other active workflow.
func (e *Engine) start(ctx context.Context, wf store.Workflow) (again bool, err error) {
	in, err := e.st.GetInstall(ctx, wf.InstallID)
	if err != nil {
		return false, err
	}
	plan, err := e.plan(ctx, wf.Kind, wf.Action, in, wf.AppRevision, nil)
	if err != nil {
		var pe *PlanError
		if errors.As(err, &pe) || errs.CodeOf(err) != errs.Internal {
			_, err = e.st.EndWorkflow(ctx, wf.ID, store.WorkflowFailed, "plan: "+err.Error(), "", 0, e.now())
			return false, err
		}
		return false, err
	}
	state := store.WorkflowRunning
	if wf.RequireApproval && len(plan.Steps) > 0 {
		state = store.WorkflowAwaitingApproval
	}
	ok, err := e.st.StartWorkflow(ctx, wf.ID, plan.Steps, state, plan.Inputs, e.now())
	if err != nil || !ok {
		return false, err
	}
	e.hub.FleetChanged()
	return true, nil // running: start steps; awaiting approval: plan them
}

// run advances a running workflow; again is true when it changed
// something that may let more happen.
func (e *Engine) run(ctx context.Context, wf store.Workflow, steps []store.Step) (again bool, err error) {
	byName := map[string]*store.Step{}
	for i := range steps {
		byName[steps[i].Name] = &steps[i]
	}
	// Record the steps whose jobs have ended.
	running := 0
	for i := range steps {
		s := &steps[i]
		if s.State != store.StepRunning {
			continue
		}
		j, err := e.st.GetJob(ctx, s.JobID)
		if err != nil {
			return false, err
		}
		if !j.State.Terminal() {
			running++
			if wf.CancelRequested && !j.CancelRequested {
				reason := "workflow " + wf.ID + " cancelled"
				jc, err := e.st.RequestCancel(ctx, j.ID, reason, "imsd", e.now())
				if err != nil && !errs.Is(err, errs.Conflict) {
					return false, err
				}
				if err == nil && !jc.State.Terminal() && jc.AgentID != "" {
					e.hub.Cancel(jc.AgentID, dispatch.CancelRequest{JobID: jc.ID, Reason: reason})
				}
				e.hub.NotifyLog(j.ID)
				if jc.State.Terminal() {
					again = true // a queued job ends at once
				}
			}
			continue
		}
		if err := e.finish(ctx, wf, s, j); err != nil {
			return false, err
		}
		again = true
	}
	if again {
		return true, nil
	}
	if wf.CancelRequested {
		if running > 0 {
			return false, nil
		}
		return false, e.end(ctx, wf, store.WorkflowCancelled, cmp.Or(wf.CancelReason, "cancelled"))
	}
	// Skip what can no longer run, start what is ready.
	var blocked []string
	reasons := map[string]string{}
	for _, s := range steps {
		if s.State != store.StepPending {
			continue
		}
		for _, n := range s.Needs {
			if d := byName[n]; d != nil && (d.State == store.StepFailed || d.State == store.StepSkipped || d.State == store.StepCancelled) {
				blocked = append(blocked, s.Name)
				reasons[s.Name] = fmt.Sprintf("not run: %s %s", n, d.State)
				byName[s.Name].State = store.StepSkipped
				break
			}
		}
	}
	for _, n := range blocked {
		if err := e.st.EndSteps(ctx, wf.ID, []string{n}, store.StepSkipped, reasons[n], e.now()); err != nil {
			return false, err
		}
	}
	pending := 0
	var sc *stepContext // read once, when the first step starts
	var started bool
	for i := range steps {
		s := &steps[i]
		if s.State != store.StepPending {
			continue
		}
		pending++
		if running >= wf.Parallelism {
			continue
		}
		ready := true
		for _, n := range s.Needs {
			if d := byName[n]; d != nil && d.State != store.StepSucceeded {
				ready = false
				break
			}
		}
		if !ready {
			continue
		}
		if needsApproval(wf, s) {
			// Plan it now that it can be, and ask again.
			ok, err := e.st.AwaitApproval(ctx, wf.ID, "plan "+s.Name+" once the steps it needs have run", e.now())
			if err != nil {
				return false, err
			}
			if started || ok {
				e.hub.FleetChanged()
			}
			return ok, nil
		}
		if sc == nil {
			if sc, err = e.stepContext(ctx, wf); err != nil {
				return false, err
			}
		}
		ok, err := e.startStep(ctx, wf, sc, s)
		if err != nil {
			return false, err
		}
		if ok {
			running++
			started = true
		} else {
			again = true // it failed to render; its users are skipped next round
		}
	}
	if started {
		e.hub.FleetChanged()
	}
	if pending == 0 && running == 0 {
		state, msg := store.WorkflowSucceeded, ""
		var failed []string
		for _, s := range steps {
			if s.State != store.StepSucceeded {
				failed = append(failed, s.Name+" "+string(s.State))
			}
		}
		if len(failed) > 0 {
			state, msg = store.WorkflowFailed, "steps not succeeded: "+strings.Join(failed, ", ")
		}
		return false, e.end(ctx, wf, state, msg)
	}
	return again, nil
}

// end ends a workflow and moves its install, then wakes the install's next
// queued workflow.
func (e *Engine) end(ctx context.Context, wf store.Workflow, state store.WorkflowState, msg string) error {
	var install store.InstallState
	var rev int64
	switch {
	case state == store.WorkflowSucceeded && wf.Kind == Deprovision:
		install = store.InstallDeprovisioned
	case state == store.WorkflowSucceeded && (wf.Kind == Provision || wf.Kind == Update):
		install, rev = store.InstallActive, wf.AppRevision
	case wf.Kind == Provision || wf.Kind == Update || wf.Kind == Deprovision:
		install = store.InstallFailed
	}
	var ok bool
	var err error
	if wf.Kind == Action {
		var health *store.InstallHealth
		if health, err = e.health(ctx, wf, state, msg); err != nil {
			return err
		}
		ok, err = e.st.EndActionRun(ctx, wf.ID, state, msg, health, e.now())
	} else {
		ok, err = e.st.EndWorkflow(ctx, wf.ID, state, msg, install, rev, e.now())
	}
	if err != nil || !ok {
		return err
	}
	e.hub.FleetChanged()
	next, err := e.st.ListWorkflows(ctx, store.WorkflowFilter{InstallID: wf.InstallID, Active: true})
	if err != nil {
		return err
	}
	for _, n := range next {
		e.Kick(n.ID)
	}
	return nil
}

// finish records how a step's job ended, and for a deploy what the install
// now runs.
func (e *Engine) finish(ctx context.Context, wf store.Workflow, s *store.Step, j store.Job) error {
	state := store.StepFailed
	switch j.State {
	case store.JobSucceeded:
		state = store.StepSucceeded
	case store.JobCancelled:
		state = store.StepCancelled
	}
	// A refused job (its mode is off in the customer's account) fails its
	// step for good, with the agent's words: no retry would change that.
	msg := j.Error
	if state == store.StepFailed && msg == "" {
		msg = fmt.Sprintf("job %s %s", j.ID, j.State)
	}
	if replanned, err := e.planChanged(ctx, wf, s, j); replanned || err != nil {
		return err
	}
	var deployed *store.InstallComponent
	var removed string
	if state == store.StepSucceeded && s.Component != "" {
		if s.Operation == OpDestroy {
			removed = s.Component
		} else {
			d, err := e.deployed(ctx, wf, s, j)
			if err != nil {
				return err
			}
			deployed = &d
		}
	}
	ok, err := e.st.FinishStep(ctx, wf.ID, s.Name, j.ID, state, msg, deployed, removed, e.now())
	if err != nil {
		return err
	}
	if ok {
		s.State = state
	}
	return nil
}

// deployed is the install component a succeeded deploy leaves.
func (e *Engine) deployed(ctx context.Context, wf store.Workflow, s *store.Step, j store.Job) (store.InstallComponent, error) {
	canon, digest, err := deployedConfig(s, j)
	if err != nil {
		return store.InstallComponent{}, err
	}
	d := store.InstallComponent{InstallID: wf.InstallID, Name: s.Component, ComponentType: s.ComponentType, Digest: digest,
		Config: canon, Outputs: j.Outputs, AppRevision: wf.AppRevision, WorkflowID: wf.ID, JobID: j.ID, DeployedAt: e.now()}
	in, err := e.st.GetInstall(ctx, wf.InstallID)
	if err != nil {
		return d, err
	}
	app, err := e.app(ctx, in.AppID, wf.AppRevision)
	if err != nil {
		return d, err
	}
	d.Needs = app.Graph().Deps(s.Component)
	return d, nil
}

// deployedConfig is the config a deploy of step s by job j records, and
// its digest: the job's, less the keys imsd added for the agent.
func deployedConfig(s *store.Step, j store.Job) ([]byte, string, error) {
	var cfg map[string]any
	if err := json.Unmarshal(j.Config, &cfg); err != nil {
		return nil, "", fmt.Errorf("job %s config: %w", j.ID, err)
	}
	delete(cfg, jobconfig.ImportIDKey)
	delete(cfg, SensitiveKey)
	delete(cfg, CustomerInputsKey)
	delete(cfg, VendorPoliciesKey)
	if names, ok := cfg[SecretsKey].([]any); ok && len(names) > 0 && s.Component != "" {
		// The secrets list was added from references; keep what the
		// config itself said, which the step's own config still has.
		var own map[string]any
		if json.Unmarshal(s.Config, &own) == nil {
			if v, ok := own[SecretsKey]; ok {
				cfg[SecretsKey] = v
			} else {
				delete(cfg, SecretsKey)
			}
		}
	}
	canon, digest := Canonical(cfg)
	return canon, digest, nil
}

// stepContext is what rendering steps needs, read once per pass: the
// install, the resolved inputs, what the install runs (its outputs) and
// the values to redact.
type stepContext struct {
	in        store.Install
	inputs    map[string]any
	outputs   map[string]map[string]string
	sensitive []string
	// app is the workflow's app revision.
	app     *config.App
	schemas map[string]*configschema.Schema
	// deferred: Renderer.Deferred (an offline bundle's workflow).
	deferred map[string]bool
}

func (e *Engine) stepContext(ctx context.Context, wf store.Workflow) (*stepContext, error) {
	in, err := e.st.GetInstall(ctx, wf.InstallID)
	if err != nil {
		return nil, err
	}
	sc := &stepContext{in: in, outputs: map[string]map[string]string{}}
	if err := json.Unmarshal(wf.Inputs, &sc.inputs); err != nil {
		return nil, fmt.Errorf("workflow %s inputs: %w", wf.ID, err)
	}
	deployed, err := e.st.InstallComponents(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	for _, d := range deployed {
		sc.outputs[d.Name] = d.Outputs
	}
	app, err := e.app(ctx, in.AppID, wf.AppRevision)
	if err != nil {
		return nil, err
	}
	sc.app = app
	if sc.schemas, err = e.schemas(ctx); err != nil {
		return nil, err
	}
	for _, n := range app.SensitiveInputs() {
		if v, ok := sc.inputs[n]; ok {
			if s := config.InputText(v); s != "" {
				sc.sensitive = append(sc.sensitive, s)
			}
		}
	}
	return sc, nil
}

// startStep renders a ready step and enqueues its job. ok is false when the
// step could not be rendered (it is failed) or was started by someone else.
func (e *Engine) startStep(ctx context.Context, wf store.Workflow, sc *stepContext, s *store.Step) (ok bool, err error) {
	cfg, err := jobConfig(sc, s)
	if err != nil {
		msg := "render: " + err.Error()
		if err := e.st.EndSteps(ctx, wf.ID, []string{s.Name}, store.StepFailed, msg, e.now()); err != nil {
			return false, err
		}
		s.State = store.StepFailed
		return false, nil
	}
	now := e.now()
	j := store.Job{ID: auth.NewSortableID("job_", now), InstallID: wf.InstallID, ComponentType: s.ComponentType, Operation: s.Operation,
		Component: s.Component, Config: cfg, MaxAttempts: MaxJobAttempts, Timeout: s.Timeout, CreatedAt: now, CreatedBy: "workflow " + wf.ID,
		Mode: StepMode(wf, s, sc.app), ReleaseID: wf.ReleaseID,
		// A release's jobs run only inside the install's maintenance
		// windows: imsd holds them, the agent refuses them outside the
		// customer's.
		WindowBound: wf.ReleaseID != ""}
	if s.Operation == OpApply || s.Operation == OpDestroy {
		j.ApprovedPlanDigest = s.ApprovedPlanDigest
	}
	ok, err = e.st.StartStep(ctx, wf.ID, s.Name, j, now)
	if err != nil {
		return false, err
	}
	if ok {
		s.State = store.StepRunning
		s.JobID = j.ID
		e.hub.Wake(wf.InstallID)
	}
	return ok, nil
}

// jobConfig renders a step's config for its job: component configs in
// full, action configs only in their environment; the secrets referred to
// are listed for the agent, and the values of sensitive inputs are listed
// for it to redact.
func jobConfig(sc *stepContext, s *store.Step) ([]byte, error) {
	var cfg map[string]any
	if err := json.Unmarshal(s.Config, &cfg); err != nil {
		return nil, fmt.Errorf("step config: %w", err)
	}
	r := &Renderer{InstallID: sc.in.ID, InstallName: sc.in.Name, Inputs: sc.inputs, Outputs: sc.outputs, Schemas: sc.schemas,
		Customer: CustomerInputs(sc.app), Deferred: sc.deferred}
	var err error
	switch {
	case s.Action != "":
		if env, ok := cfg["env"]; ok {
			if cfg["env"], err = renderEnv("env", env, r); err != nil {
				return nil, err
			}
		}
		steps, _ := cfg["steps"].([]any)
		for i, st := range steps {
			m, _ := st.(map[string]any)
			if env, ok := m["env"]; ok {
				if m["env"], err = renderEnv(fmt.Sprintf("steps[%d].env", i), env, r); err != nil {
					return nil, err
				}
			}
		}
	case s.Operation == OpApply:
		if cfg, err = r.Config(s.ComponentType, cfg); err != nil {
			return nil, err
		}
	}
	// Destroy configs are what was applied: already rendered, secrets
	// still as references.
	secrets := r.Secrets()
	if s.Operation == OpDestroy {
		secrets = append(secrets, secretNames(cfg)...)
	}
	if own, ok := cfg[SecretsKey].([]any); ok {
		for _, v := range own {
			if n, ok := v.(string); ok {
				secrets = append(secrets, n)
			}
		}
	}
	if secrets = slices.Compact(slices.Sorted(slices.Values(secrets))); len(secrets) > 0 {
		cfg[SecretsKey] = secrets
	}
	// Customer inputs the agent fills in: those referred to now, and in a
	// destroy's already rendered config, the references left in it.
	customer := r.CustomerRefs()
	if s.Operation == OpDestroy {
		b, _ := json.Marshal(cfg)
		customer = append(customer, agentproto.InputNames(string(b))...)
	}
	if customer = slices.Compact(slices.Sorted(slices.Values(customer))); len(customer) > 0 {
		cfg[CustomerInputsKey] = customer
	}
	// Values of sensitive inputs, and of the fields the type's schema
	// marks sensitive: the agent redacts them from everything the job
	// sends back, and every read of the job's config masks them.
	sensitive := slices.Clone(sc.sensitive)
	if sch := sc.schemas[s.ComponentType]; sch != nil {
		for _, v := range sch.Sensitive(cfg) {
			if !strings.Contains(v, "{{") && !slices.Contains(sensitive, v) {
				sensitive = append(sensitive, v)
			}
		}
	}
	if len(sensitive) > 0 {
		cfg[SensitiveKey] = sensitive
	}
	if s.Component != "" && s.Action == "" && (s.Operation == OpApply || s.Operation == OpDestroy) {
		if pols := vendorPolicies(sc.app, s.ComponentType); len(pols) > 0 {
			cfg[VendorPoliciesKey] = pols
		}
	}
	// A rendered config may be past a limit the app's own config was
	// within (inputs and outputs make it grow): the step fails here,
	// saying which, rather than as a job no agent takes.
	if err := agentproto.CheckConfig(cfg); err != nil {
		return nil, err
	}
	return json.Marshal(cfg)
}

// renderEnv renders an action's environment. Every value is a string in
// the end: a whole-value reference to a number or bool input
// ("{{ .inputs.size }}") renders as its text, since environment variables
// have no types (and the action type's schema wants strings).
func renderEnv(path string, env any, r *Renderer) (any, error) {
	v, err := template.RenderValue(path, env, r.Resolve, nil)
	if err != nil {
		return nil, err
	}
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			if _, ok := x.(string); !ok {
				m[k] = config.InputText(x)
			}
		}
	}
	return v, nil
}

// secretNames finds the {{ .secrets.NAME }} references left in a rendered
// config.
func secretNames(cfg map[string]any) []string {
	var out []string
	b, _ := json.Marshal(cfg)
	template.ReplaceSecrets(string(b), func(n string) (string, bool) { //nolint:errcheck // only collecting names
		out = append(out, n)
		return "", true
	})
	return out
}

// appCache keeps parsed app revisions; revisions never change.
type appCache struct {
	mu sync.Mutex
	m  map[string]*config.App
}

func (c *appCache) get(ctx context.Context, st *store.Store, appID string, rev int64) (*config.App, error) {
	key := fmt.Sprintf("%s@%d", appID, rev)
	c.mu.Lock()
	app, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return app, nil
	}
	r, err := st.GetAppRevision(ctx, appID, rev)
	if err != nil {
		return nil, err
	}
	app, err = load.Parse(r.Files, validate.Options{AnyType: true, Stored: true})
	if err != nil {
		return nil, fmt.Errorf("app %s revision %d no longer parses: %w", appID, rev, err)
	}
	c.mu.Lock()
	if len(c.m) > 256 {
		clear(c.m)
	}
	c.m[key] = app
	c.mu.Unlock()
	return app, nil
}
