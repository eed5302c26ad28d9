// Package sdktest runs a plugin in-process and drives it the way the agent
// does: over the real gRPC service, through an *sdk.Client, without a
// subprocess. Plugin authors use it in their own tests.
//
// [Test] is the harness: it negotiates the protocol, then runs each [Step]
// as the agent runs a job (validate the config, then plan, apply, destroy
// or drift in a fresh work directory with the agent's environment, and
// the component's state directory), checks what came back, and at the end
// destroys what the steps applied, as a real install's deprovision would.
//
// The directories live as they do on an agent: each step's work
// directory is new and is deleted once the step's checks ran; the state
// directory is one for the whole case, kept across its steps, so a
// destroy finds what an earlier apply kept there.
//
//	func TestBucket(t *testing.T) {
//		sdktest.Test(t, bucket.New(), sdktest.Case{Steps: []sdktest.Step{
//			{Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectChanges("create")},
//			{Config: cfg, Check: sdktest.ExpectOutput("name", "b1")},
//			{Config: map[string]any{"nme": "x"}, ExpectDiagnostics: []string{"nme: unknown field"}},
//		}})
//	}
package sdktest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/configschema"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/plugins/sdk/redact"
)

// Start serves p on an in-memory connection and returns a client for it
// that has negotiated the protocol, as the agent does before any call.
// Everything is stopped when the test ends.
func Start(tb testing.TB, p sdk.Plugin) *sdk.Client {
	tb.Helper()
	c := StartRaw(tb, p)
	if _, err := c.Negotiate(tb.Context()); err != nil {
		tb.Fatalf("negotiate protocol: %v", err)
	}
	return c
}

// StartRaw is Start without negotiation.
func StartRaw(tb testing.TB, p sdk.Plugin) *sdk.Client {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	if err := (&sdk.GRPCPlugin{Impl: p}).GRPCServer(nil, srv); err != nil {
		tb.Fatalf("register plugin: %v", err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///sdktest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		tb.Fatalf("dial plugin: %v", err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return sdk.NewClient(conn)
}

// Run performs op and returns the result and every log line in order. A
// call error fails the test.
func Run(tb testing.TB, c *sdk.Client, op string, req *sdk.RunRequest) (*sdk.Result, []sdk.LogEvent) {
	tb.Helper()
	var logs []sdk.LogEvent
	res, err := c.Run(tb.Context(), op, req, func(e sdk.LogEvent) { logs = append(logs, e) })
	if err != nil {
		tb.Fatalf("%s: %v", op, err)
	}
	return res, logs
}

// Case is a sequence of steps run against one plugin.
type Case struct {
	// InstallID names the install the jobs belong to; "install-test" if
	// empty.
	InstallID string
	// Env is added to every step's environment.
	Env map[string]string
	// Steps run in order; the first failing step ends the test.
	Steps []Step
	// SkipDestroy leaves what the steps applied in place. By default, a
	// plugin with the destroy capability is asked to destroy the last
	// config applied, and the destroy must succeed.
	SkipDestroy bool
	// CheckDestroy, if set, checks every successful destroy: the final
	// one and any explicit destroy step (after the step's own Check).
	CheckDestroy Check
	// Component names the component the jobs are for; "test-component" if
	// empty. Its state directory is kept across the steps.
	Component string
	// NoStateDir runs the steps without a state directory, as an agent of
	// protocol 1.1 or a job of no component (an action run) would.
	NoStateDir bool
	// Secrets are the agent's secrets, by name (its --secrets-file). As
	// on the agent, a step's config names those its job receives in a
	// top-level "secrets" list; each is then an environment variable of
	// the operation and replaces its {{ .secrets.NAME }} in the config's
	// strings, and every value of Secrets is redacted (as "***") from the
	// step's logs, outputs, error and planned changes.
	Secrets map[string]string
	// Inputs are the install stack's customer inputs, by name: a config's
	// "customer_inputs" list names those whose {{ .inputs.NAME }} are
	// filled in.
	Inputs map[string]string
}

// Step is one job.
type Step struct {
	// Name labels the step in failures; "step N (op)" if empty.
	Name string
	// Op is sdk.OpPlan, OpApply (the default), OpDestroy, OpDrift,
	// OpPlanDestroy (the plan of a destroy, for a sdk.DestroyPlanner) or
	// OpImport (for a sdk.Importer; set ImportID).
	Op string
	// ImportID names the existing resource an OpImport step adopts. A
	// successful import counts as an apply: the case destroys what it
	// imported at the end unless SkipDestroy.
	ImportID string
	// Config is the component config.
	Config map[string]any
	// Env is added to the case's environment for this step.
	Env map[string]string
	// PreConfig, if set, runs before the step, to change the world behind
	// the plugin's back (to test drift, say). An error fails the test.
	PreConfig func() error
	// Timeout is the job's time limit; one minute if zero.
	Timeout time.Duration
	// Mode is the job's permission mode (JobContext.Mode); "maintenance"
	// if empty, as the agent's default.
	Mode string
	// Policies are the job's policies (JobContext.Policies), as the agent
	// hands them: vendor and customer modules.
	Policies []sdk.PolicyModule
	// ApprovedPlan runs an apply (or destroy) step as the apply of the
	// plan the case's last successful plan (or plan-destroy) step made,
	// approved by an operator: as the
	// agent does, the harness plans again first (in a fresh PlanDir) and
	// calls Apply, with JobContext.ApprovedPlanDigest and PlanDir the
	// approved plan's saved directory, only if the fresh plan has the
	// same digest; otherwise the step fails with "plan changed since
	// approval" (match it with ExpectError) and Apply is not called.
	ApprovedPlan bool
	// ExpectDiagnostics, if set, expects validation to fail: each entry is
	// "field: message", matched against a diagnostic by substring. The
	// operation is then not run, as the agent would not run it.
	ExpectDiagnostics []string
	// ExpectError, if set, expects the operation to fail with an error
	// matching it.
	ExpectError *regexp.Regexp
	// Check, if set, checks the outcome.
	Check Check
}

// Outcome is what one step produced, redacted as the agent redacts what
// a job sends back.
type Outcome struct {
	Result *sdk.Result
	// Logs are the lines the plugin sent, then what it printed itself
	// (fmt.Println, log.Print, os.Stderr) during the operation, as the
	// agent logs it: "[plugin stdout] ..." on the system stream.
	Logs []sdk.LogEvent
	// Warnings are the warnings validation found (the step ran).
	Warnings []sdk.Diagnostic
	// Config is the config the plugin saw: the step's, through the
	// agent's pipeline (reserved keys taken out, listed inputs and
	// secrets filled in).
	Config map[string]any
	// WorkDir was the job's work directory. It is deleted once the step's
	// checks have run, as the agent deletes it when the job ends.
	WorkDir string
	// StateDir is the component's state directory, the same for every
	// step of the case (empty with Case.NoStateDir).
	StateDir string
	// PlanDigest is the digest of a plan step's plan (sdk.PlanDigestOf of
	// its changes) or, for an approved apply, of the fresh plan made
	// before it; PlanDir is where the plan's artifact was kept
	// (STATE_DIR/.byoc-plans/<hex>/), or the approved plan's directory
	// an approved apply was given.
	PlanDigest, PlanDir string
}

// Log returns the log lines joined by newlines.
func (o *Outcome) Log() string {
	lines := make([]string, len(o.Logs))
	for i, e := range o.Logs {
		lines[i] = e.Text
	}
	return strings.Join(lines, "\n")
}

// Check inspects a step's outcome and says what is wrong.
type Check func(*Outcome) error

// Test runs c against p in-process. Failures are reported through t.
func Test(t testing.TB, p sdk.Plugin, c Case) {
	t.Helper()
	client := StartRaw(t, p)
	desc, err := client.Negotiate(t.Context())
	if err != nil {
		t.Fatalf("negotiate protocol: %v", err)
	}
	if desc.Type == "" {
		t.Fatalf("describe: the plugin's type is empty")
	}
	if c.InstallID == "" {
		c.InstallID = "install-test"
	}
	if c.Component == "" {
		c.Component = "test-component"
	}
	stateDir := ""
	if !c.NoStateDir {
		stateDir = filepath.Join(t.TempDir(), "components", c.Component)
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			t.Fatalf("state dir: %v", err)
		}
	}
	var applied map[string]any
	didApply := false
	n := 0
	// approved is the digest of the last successful plan step's plan.
	approved := ""
	plans := ""
	if stateDir != "" {
		plans = filepath.Join(stateDir, sdk.PlanDirName)
	}
	runJob := func(name, op string, config map[string]any, env map[string]string, timeout time.Duration, mode string, policies []sdk.PolicyModule, approvedApply bool, importID string) (*Outcome, []sdk.Diagnostic) {
		t.Helper()
		n++
		work := filepath.Join(t.TempDir(), fmt.Sprintf("job-%d-1", n))
		if err := os.MkdirAll(work, 0o700); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if timeout == 0 {
			timeout = time.Minute
		}
		out := &Outcome{WorkDir: work, StateDir: stateDir}
		// The agent's config pipeline, its own code (jobconfig): the
		// reserved keys out, inputs and secrets in.
		prep, perr := jobconfig.Prepare(config, jobconfig.Sources{Secrets: c.Secrets, Inputs: c.Inputs, SecretsOrigin: "Case.Secrets"})
		red := redactor(c.Secrets, prep.Sensitive)
		var logMu sync.Mutex
		stream := red.NewStream(redactHold, func(e redact.Event) {
			logMu.Lock()
			defer logMu.Unlock()
			out.Logs = append(out.Logs, sdk.LogEvent{Stream: sdk.Stream(e.Stream), Text: e.Text})
		})
		logf := func(e sdk.LogEvent) { stream.Add(redact.Event{Stream: int32(e.Stream), Text: e.Text}) }
		if perr != nil {
			// The agent fails such a job before its plugin starts.
			msg := red.String(perr.Error())
			logf(sdk.LogEvent{Stream: sdk.StreamSystem, Text: "[agentd] " + msg})
			stream.Flush()
			out.Result = &sdk.Result{ExitCode: -1, Error: msg}
			return out, nil
		}
		config, out.Config = prep.Config, prep.Config
		for _, p := range prep.Policies {
			policies = append(policies, sdk.PolicyModule{Name: p.Name, Source: sdk.PolicySourceVendor, Rego: p.Rego})
		}
		if len(prep.SecretEnv) > 0 {
			env = maps.Clone(env)
			if env == nil {
				env = map[string]string{}
			}
			maps.Copy(env, prep.SecretEnv)
		}
		job := sdk.JobContext{JobID: fmt.Sprintf("job-%d", n), InstallID: c.InstallID, Attempt: 1, WorkDir: work,
			StateDir: stateDir, Timeout: timeout, Component: c.Component, Mode: cmp.Or(mode, "maintenance"), Policies: policies}
		var v *sdk.ValidateResponse
		err := captureOutput(logf, func() (err error) {
			v, err = client.Validate(t.Context(), config)
			return err
		})
		if err != nil {
			t.Fatalf("%s: validate: %v", name, err)
		}
		for i := range v.Diagnostics {
			v.Diagnostics[i].Message = red.String(v.Diagnostics[i].Message)
		}
		if errs := configschema.Errors(v.Diagnostics); len(errs) > 0 {
			return nil, errs
		}
		// Warnings let the job run, as on the agent, which logs them.
		for _, d := range v.Diagnostics {
			out.Warnings = append(out.Warnings, d)
			logf(sdk.LogEvent{Stream: sdk.StreamSystem, Text: "[agentd] warning: config." + d.String()})
		}
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		// What leaves the step is redacted, as what leaves the agent.
		defer func() {
			stream.Flush()
			redactResult(red, out.Result)
		}()
		// plan runs a plan into a fresh plan dir and keeps its artifact
		// under its digest, as the agent does.
		plan := func(planOp string) *sdk.Result {
			pj := job
			if plans != "" {
				pj.PlanDir = filepath.Join(plans, fmt.Sprintf("new-%s-1", job.JobID))
				if err := os.MkdirAll(pj.PlanDir, 0o700); err != nil {
					t.Fatalf("%s: plan dir: %v", name, err)
				}
			}
			var res *sdk.Result
			err := captureOutput(logf, func() (err error) {
				res, err = client.Run(ctx, planOp, &sdk.RunRequest{Job: pj, Config: config, Env: jobEnv(pj, planOp, c.Env, env)}, logf)
				return err
			})
			if err != nil {
				t.Fatalf("%s: plan: %v", name, err)
			}
			if res.Err() != nil || res.ExitCode != 0 {
				os.RemoveAll(pj.PlanDir)
				return res
			}
			// The digest is of the plan as the agent sends it: redacted.
			redactResult(red, res)
			if out.PlanDigest, err = sdk.PlanDigestOf(res.PlannedChanges); err != nil {
				t.Fatalf("%s: plan digest: %v", name, err)
			}
			if pj.PlanDir != "" {
				out.PlanDir = filepath.Join(plans, strings.TrimPrefix(out.PlanDigest, "sha256:"))
				if _, err := os.Stat(out.PlanDir); err == nil && approvedApply {
					os.RemoveAll(pj.PlanDir) // the approved plan's own artifact wins
				} else if err := errors.Join(os.RemoveAll(out.PlanDir), os.Rename(pj.PlanDir, out.PlanDir)); err != nil {
					t.Fatalf("%s: keep the plan: %v", name, err)
				}
			}
			return res
		}
		switch {
		case sdk.IsPlan(op):
			out.Result = plan(op)
			return out, nil
		case approvedApply:
			if approved == "" {
				t.Fatalf("%s: ApprovedPlan, but no plan step succeeded before it", name)
			}
			planOp := sdk.OpPlan
			if op == sdk.OpDestroy {
				planOp = sdk.OpPlanDestroy
			}
			fresh := plan(planOp)
			if fresh.Err() != nil || fresh.ExitCode != 0 {
				out.Result = fresh
				return out, nil
			}
			if out.PlanDigest != approved {
				out.Result = &sdk.Result{ExitCode: -1, PlannedChanges: fresh.PlannedChanges,
					Error: fmt.Sprintf("plan changed since approval: approved %s, the plan now is %s", approved, out.PlanDigest)}
				return out, nil
			}
			job.ApprovedPlanDigest, job.PlanDir = approved, out.PlanDir
		}
		var res *sdk.Result
		err = captureOutput(logf, func() (err error) {
			res, err = client.Run(ctx, op, &sdk.RunRequest{Job: job, Config: config, Env: jobEnv(job, op, c.Env, env), ImportID: importID}, logf)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %s: %v", name, op, err)
		}
		if plans != "" && (op == sdk.OpApply || op == sdk.OpDestroy || op == sdk.OpImport) {
			os.RemoveAll(plans) // stale now, as on the agent
		}
		out.Result = res
		return out, nil
	}
	for i, s := range c.Steps {
		op := s.Op
		if op == "" {
			op = sdk.OpApply
		}
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("step %d (%s)", i+1, op)
		}
		if s.PreConfig != nil {
			if err := s.PreConfig(); err != nil {
				t.Fatalf("%s: pre-config: %v", name, err)
			}
		}
		if s.ApprovedPlan && op != sdk.OpApply && op != sdk.OpDestroy {
			t.Fatalf("%s: ApprovedPlan is for an apply or a destroy step, not %s", name, op)
		}
		if (op == sdk.OpImport) != (s.ImportID != "") {
			t.Fatalf("%s: ImportID is for an import step, and an import step needs one", name)
		}
		out, diags := runJob(name, op, s.Config, s.Env, s.Timeout, s.Mode, s.Policies, s.ApprovedPlan, s.ImportID)
		if err := checkDiagnostics(diags, s.ExpectDiagnostics); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diags != nil {
			continue
		}
		if err := checkError(out.Result, s.ExpectError); err != nil {
			t.Fatalf("%s: %v\nlog:\n%s", name, err, out.Log())
		}
		if s.Check != nil {
			if err := s.Check(out); err != nil {
				t.Fatalf("%s: %v\nlog:\n%s", name, err, out.Log())
			}
		}
		if op == sdk.OpDestroy && out.Result.Err() == nil && c.CheckDestroy != nil {
			if err := c.CheckDestroy(out); err != nil {
				t.Fatalf("%s: destroy check: %v\nlog:\n%s", name, err, out.Log())
			}
		}
		removeWorkDir(t, name, out)
		if sdk.IsPlan(op) && out.Result.Err() == nil {
			approved = out.PlanDigest
		}
		if (op == sdk.OpApply || op == sdk.OpImport) && out.Result.Err() == nil {
			applied, didApply = s.Config, true
		}
		if op == sdk.OpDestroy && out.Result.Err() == nil {
			didApply = false
		}
	}
	if c.SkipDestroy || !didApply || !desc.Has(sdk.CapDestroy) {
		return
	}
	out, diags := runJob("final destroy", sdk.OpDestroy, applied, nil, 0, "deprovision", nil, false, "")
	if len(diags) > 0 {
		t.Fatalf("final destroy: %v", sdk.DiagnosticsError(diags))
	}
	if err := out.Result.Err(); err != nil {
		t.Fatalf("final destroy failed: %v\nlog:\n%s", err, out.Log())
	}
	if c.CheckDestroy != nil {
		if err := c.CheckDestroy(out); err != nil {
			t.Fatalf("final destroy: %v\nlog:\n%s", err, out.Log())
		}
	}
	removeWorkDir(t, "final destroy", out)
}

// removeWorkDir deletes a finished step's work directory, as the agent
// does when a job ends: nothing a plugin leaves there reaches a later job.
func removeWorkDir(t testing.TB, name string, out *Outcome) {
	t.Helper()
	if err := os.RemoveAll(out.WorkDir); err != nil {
		t.Fatalf("%s: remove work dir: %v", name, err)
	}
}

// jobEnv is the environment the agent gives a job.
func jobEnv(job sdk.JobContext, op string, layers ...map[string]string) map[string]string {
	env := map[string]string{
		"PATH":            "/usr/local/bin:/usr/bin:/bin",
		"HOME":            job.WorkDir,
		"TMPDIR":          job.WorkDir,
		"LANG":            "C.UTF-8",
		"BYOC_JOB_ID":     job.JobID,
		"BYOC_INSTALL_ID": job.InstallID,
		"BYOC_ATTEMPT":    strconv.Itoa(job.Attempt),
		"BYOC_OPERATION":  op,
	}
	if job.StateDir != "" {
		env["BYOC_STATE_DIR"] = job.StateDir
	}
	if job.PlanDir != "" {
		env["BYOC_PLAN_DIR"] = job.PlanDir
	}
	if job.ApprovedPlanDigest != "" {
		env["BYOC_APPROVED_PLAN_DIGEST"] = job.ApprovedPlanDigest
	}
	for _, l := range layers {
		for k, v := range l {
			env[k] = v
		}
	}
	return env
}

func checkDiagnostics(got []sdk.Diagnostic, want []string) error {
	if len(want) == 0 {
		if len(got) > 0 {
			return fmt.Errorf("config rejected: %v", sdk.DiagnosticsError(got))
		}
		return nil
	}
	if len(got) == 0 {
		return fmt.Errorf("config accepted; want diagnostics %q", want)
	}
	for _, w := range want {
		found := false
		for _, d := range got {
			if strings.Contains(d.String(), w) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("no diagnostic matches %q; got %v", w, sdk.DiagnosticsError(got))
		}
	}
	return nil
}

func checkError(res *sdk.Result, want *regexp.Regexp) error {
	switch err := res.Err(); {
	case want == nil && err != nil:
		return fmt.Errorf("failed (exit code %d): %v", res.ExitCode, err)
	case want == nil && res.ExitCode != 0:
		return fmt.Errorf("exit code %d", res.ExitCode)
	case want != nil && err == nil:
		return fmt.Errorf("succeeded; want an error matching %q", want)
	case want != nil && !want.MatchString(err.Error()):
		return fmt.Errorf("error %q does not match %q", err, want)
	}
	return nil
}

// ExpectOutput checks that the result has output key set to value.
func ExpectOutput(key, value string) Check {
	return func(o *Outcome) error {
		got, ok := o.Result.Outputs[key]
		if !ok {
			return fmt.Errorf("output %q missing; outputs: %v", key, o.Result.Outputs)
		}
		if got != value {
			return fmt.Errorf("output %q = %q, want %q", key, got, value)
		}
		return nil
	}
}

// ExpectLog checks that some log line contains substr.
func ExpectLog(substr string) Check {
	return func(o *Outcome) error {
		for _, e := range o.Logs {
			if strings.Contains(e.Text, substr) {
				return nil
			}
		}
		return fmt.Errorf("no log line contains %q", substr)
	}
}

// ExpectNoLog checks that no log line contains substr.
func ExpectNoLog(substr string) Check {
	return func(o *Outcome) error {
		for _, e := range o.Logs {
			if strings.Contains(e.Text, substr) {
				return fmt.Errorf("log line %q contains %q", e.Text, substr)
			}
		}
		return nil
	}
}

// ExpectStateFile checks that the component's state directory holds
// file name (a path relative to it).
func ExpectStateFile(name string) Check {
	return func(o *Outcome) error {
		if o.StateDir == "" {
			return fmt.Errorf("no state directory (Case.NoStateDir); want %s in it", name)
		}
		if _, err := os.Stat(filepath.Join(o.StateDir, name)); err != nil {
			return fmt.Errorf("state file %s: %w", name, err)
		}
		return nil
	}
}

// ExpectNoStateFile checks that the component's state directory does not
// hold file name, such as after a destroy that should have cleared it.
func ExpectNoStateFile(name string) Check {
	return func(o *Outcome) error {
		if o.StateDir == "" {
			return nil
		}
		_, err := os.Stat(filepath.Join(o.StateDir, name))
		switch {
		case err == nil:
			return fmt.Errorf("state file %s is still there", name)
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("state file %s: %w", name, err)
		}
		return nil
	}
}

// ExpectExitCode checks the result's exit code.
func ExpectExitCode(code int) Check {
	return func(o *Outcome) error {
		if o.Result.ExitCode != code {
			return fmt.Errorf("exit code %d, want %d", o.Result.ExitCode, code)
		}
		return nil
	}
}

// ExpectChanges checks that the plan's or drift's changes contain substr.
func ExpectChanges(substr string) Check {
	return func(o *Outcome) error {
		if !strings.Contains(o.Result.Changes, substr) {
			return fmt.Errorf("changes %q do not contain %q", o.Result.Changes, substr)
		}
		return nil
	}
}

// ExpectPlannedChange checks that the plan's or drift's planned changes
// include action on address (sdk.ActionCreate, ...).
func ExpectPlannedChange(action, address string) Check {
	return func(o *Outcome) error {
		var got []string
		for _, c := range o.Result.PlannedChanges {
			if c.Action == action && c.Address == address {
				return nil
			}
			got = append(got, c.Action+" "+c.Address)
		}
		return fmt.Errorf("no planned change %s %s; planned: %q", action, address, got)
	}
}

// ExpectNoPlannedChanges checks that a plan or drift check found nothing
// to change (after an import of a resource that matches its config, say).
func ExpectNoPlannedChanges() Check {
	return func(o *Outcome) error {
		if len(o.Result.PlannedChanges) > 0 {
			var got []string
			for _, c := range o.Result.PlannedChanges {
				got = append(got, c.Action+" "+c.Address)
			}
			return fmt.Errorf("planned changes %q, want none", got)
		}
		return nil
	}
}

// ExpectDrifted checks a drift check's verdict.
func ExpectDrifted(drifted bool) Check {
	return func(o *Outcome) error {
		if o.Result.Drifted != drifted {
			return fmt.Errorf("drifted = %v, want %v (changes: %q)", o.Result.Drifted, drifted, o.Result.Changes)
		}
		return nil
	}
}

// All runs every check and joins their errors.
func All(checks ...Check) Check {
	return func(o *Outcome) error {
		var errs []error
		for _, c := range checks {
			if err := c(o); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}
