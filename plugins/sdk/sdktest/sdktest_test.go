package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// counter is a plugin whose Apply adds the config's "n" to a total; it
// can destroy, and fails when told to.
type counter struct {
	mu        sync.Mutex
	total     float64
	destroyed bool
	failOn    string
}

func (c *counter) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "counter", ConfigSchema: `{"type":"object","required":["n"],"properties":{"n":{"type":"number"}},"additionalProperties":false}`}, nil
}
func (c *counter) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}
func (c *counter) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{Changes: fmt.Sprintf("add %v", req.Config["n"])}, nil
}
func (c *counter) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	if c.failOn == "apply" {
		return nil, errors.New("apply broke")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += req.Config["n"].(float64)
	req.Log.Stdout("job " + req.Job.JobID + " in " + req.Env["BYOC_INSTALL_ID"])
	return &sdk.ApplyResponse{Outputs: map[string]string{"total": fmt.Sprint(c.total)}}, nil
}
func (c *counter) Destroy(context.Context, *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	if c.failOn == "destroy" {
		return nil, errors.New("destroy broke")
	}
	c.destroyed = true
	return &sdk.DestroyResponse{}, nil
}

// fakeT records the first fatal failure of a harness run.
type fakeT struct {
	testing.TB
	real  *testing.T
	fatal string
}

func (f *fakeT) Helper()                  {}
func (f *fakeT) Context() context.Context { return f.real.Context() }
func (f *fakeT) TempDir() string          { return f.real.TempDir() }
func (f *fakeT) Cleanup(fn func())        { f.real.Cleanup(fn) }
func (f *fakeT) Fatalf(format string, a ...any) {
	f.fatal = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

// harness runs sdktest.Test against p with a fake T and returns its fatal
// message, "" if it passed.
func harness(t *testing.T, p sdk.Plugin, c sdktest.Case) string {
	f := &fakeT{real: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sdktest.Test(f, p, c)
	}()
	<-done
	return f.fatal
}

func TestHarnessPasses(t *testing.T) {
	p := &counter{}
	msg := harness(t, p, sdktest.Case{InstallID: "ins-7", Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: map[string]any{"n": 2}, Check: sdktest.ExpectChanges("add 2")},
		{Config: map[string]any{"n": 2}, Check: sdktest.All(sdktest.ExpectOutput("total", "2"), sdktest.ExpectLog("job job-2 in ins-7"))},
		{Config: map[string]any{"n": 3}, Check: sdktest.ExpectOutput("total", "5")},
		{Config: map[string]any{"m": 3}, ExpectDiagnostics: []string{"n: is required", "m: unknown field"}},
	}})
	if msg != "" {
		t.Fatal(msg)
	}
	if !p.destroyed {
		t.Error("the harness did not destroy what the steps applied")
	}
}

func TestHarnessFails(t *testing.T) {
	tests := []struct {
		name   string
		failOn string
		c      sdktest.Case
		want   string
	}{
		{"check fails", "", sdktest.Case{Steps: []sdktest.Step{
			{Config: map[string]any{"n": 1}, Check: sdktest.ExpectOutput("total", "9")},
		}}, `step 1 (apply): output "total" = "1", want "9"`},
		{"operation fails", "apply", sdktest.Case{Steps: []sdktest.Step{
			{Name: "first apply", Config: map[string]any{"n": 1}},
		}}, "first apply: failed (exit code 1): apply broke"},
		{"error expected", "", sdktest.Case{Steps: []sdktest.Step{
			{Config: map[string]any{"n": 1}, ExpectError: regexp.MustCompile("boom")},
		}}, `succeeded; want an error matching "boom"`},
		{"config rejected", "", sdktest.Case{Steps: []sdktest.Step{
			{Config: map[string]any{"n": "x"}},
		}}, "config rejected: invalid config: n: got string, want number"},
		{"diagnostics expected", "", sdktest.Case{Steps: []sdktest.Step{
			{Config: map[string]any{"n": 1}, ExpectDiagnostics: []string{"n: "}},
		}}, `config accepted; want diagnostics ["n: "]`},
		{"final destroy fails", "destroy", sdktest.Case{Steps: []sdktest.Step{
			{Config: map[string]any{"n": 1}},
		}}, "final destroy failed: destroy broke"},
		{"pre-config fails", "", sdktest.Case{Steps: []sdktest.Step{
			{Config: map[string]any{"n": 1}, PreConfig: func() error { return errors.New("no disk") }},
		}}, "pre-config: no disk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := harness(t, &counter{failOn: tt.failOn}, tt.c)
			if !strings.Contains(msg, tt.want) {
				t.Errorf("harness said %q, want %q", msg, tt.want)
			}
		})
	}
}

// keeper is a plugin that keeps what it applied in its state directory,
// as a Terraform type keeps its state; a leaky one forgets to clear it on
// destroy.
type keeper struct{ leaky bool }

func (k keeper) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "keeper"}, nil
}
func (k keeper) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}
func (k keeper) Plan(context.Context, *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{}, nil
}
func (k keeper) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	if req.Job.StateDir == "" {
		return nil, errors.New("no state directory")
	}
	file := filepath.Join(req.Job.StateDir, "applied")
	prev, _ := os.ReadFile(file)
	if len(prev) > 0 {
		// What an earlier job left in its work dir is gone.
		_, err := os.Stat(string(prev))
		req.Log.System(fmt.Sprintf("previous work dir gone: %v", errors.Is(err, os.ErrNotExist)))
	}
	if req.Env["BYOC_STATE_DIR"] != req.Job.StateDir {
		return nil, fmt.Errorf("BYOC_STATE_DIR %q, want %q", req.Env["BYOC_STATE_DIR"], req.Job.StateDir)
	}
	return &sdk.ApplyResponse{}, os.WriteFile(file, []byte(req.Job.WorkDir), 0o600)
}
func (k keeper) Destroy(_ context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	if _, err := os.Stat(filepath.Join(req.Job.StateDir, "applied")); err != nil {
		return nil, fmt.Errorf("destroy cannot find what apply kept: %w", err)
	}
	if k.leaky {
		return &sdk.DestroyResponse{}, nil
	}
	return &sdk.DestroyResponse{}, os.Remove(filepath.Join(req.Job.StateDir, "applied"))
}

// The state directory is kept across a case's steps (the work dirs are
// not), so the destroy finds what apply kept and CheckDestroy tests
// something: a leaky destroy fails it, after the final destroy and after
// an explicit destroy step alike.
func TestHarnessKeepsState(t *testing.T) {
	cleared := sdktest.ExpectNoStateFile("applied")
	apply := sdktest.Step{Config: map[string]any{}, Check: sdktest.ExpectStateFile("applied")}
	msg := harness(t, keeper{}, sdktest.Case{Component: "db", CheckDestroy: cleared, Steps: []sdktest.Step{
		apply,
		{Config: map[string]any{}, Check: sdktest.ExpectLog("previous work dir gone: true")},
	}})
	if msg != "" {
		t.Fatal(msg)
	}
	if msg := harness(t, keeper{leaky: true}, sdktest.Case{CheckDestroy: cleared, Steps: []sdktest.Step{apply}}); !strings.Contains(msg, "final destroy: state file applied is still there") {
		t.Errorf("leaky final destroy: harness said %q", msg)
	}
	msg = harness(t, keeper{leaky: true}, sdktest.Case{CheckDestroy: cleared, Steps: []sdktest.Step{apply, {Op: sdk.OpDestroy, Config: map[string]any{}}}})
	if !strings.Contains(msg, "step 2 (destroy): destroy check: state file applied is still there") {
		t.Errorf("leaky destroy step: harness said %q", msg)
	}
	msg = harness(t, keeper{}, sdktest.Case{NoStateDir: true, Steps: []sdktest.Step{apply}})
	if !strings.Contains(msg, "no state directory") {
		t.Errorf("without a state dir: harness said %q", msg)
	}
}

// saver plans to write the config's "text" into the state dir, saving the
// text in its plan dir, and applies what the approved plan saved (or the
// config's text without an approved plan).
type saver struct{}

func (saver) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "saver", Version: "1"}, nil
}
func (saver) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}
func (saver) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	text, _ := req.Config["text"].(string)
	old, _ := os.ReadFile(filepath.Join(req.Job.StateDir, "out"))
	if err := os.WriteFile(filepath.Join(req.Job.PlanDir, "plan"), []byte(text), 0o600); err != nil {
		return nil, err
	}
	return &sdk.PlanResponse{PlannedChanges: []sdk.PlannedChange{{Address: "out", Action: sdk.ActionUpdate,
		Before: map[string]any{"text": string(old)}, After: map[string]any{"text": text}}}}, nil
}
func (saver) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	text, _ := req.Config["text"].(string)
	if req.Job.ApprovedPlanDigest != "" {
		b, err := os.ReadFile(filepath.Join(req.Job.PlanDir, "plan"))
		if err != nil {
			return nil, err
		}
		text = "saved:" + string(b)
	}
	return &sdk.ApplyResponse{}, os.WriteFile(filepath.Join(req.Job.StateDir, "out"), []byte(text), 0o600)
}

// An approved apply step plans again and applies the saved plan when it
// is the approved one; a plan that changed in between fails the step
// without applying.
func TestHarnessApprovedPlan(t *testing.T) {
	out := func(want string) sdktest.Check {
		return func(o *sdktest.Outcome) error {
			b, _ := os.ReadFile(filepath.Join(o.StateDir, "out"))
			if string(b) != want {
				return fmt.Errorf("out is %q, want %q", b, want)
			}
			return nil
		}
	}
	var planned string
	msg := harness(t, saver{}, sdktest.Case{Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: map[string]any{"text": "a"}, Check: func(o *sdktest.Outcome) error {
			planned = o.PlanDigest
			if b, err := os.ReadFile(filepath.Join(o.PlanDir, "plan")); err != nil || string(b) != "a" {
				return fmt.Errorf("the plan's artifact in %s: %q %v", o.PlanDir, b, err)
			}
			return nil
		}},
		{ApprovedPlan: true, Config: map[string]any{"text": "a"}, Check: sdktest.All(out("saved:a"), func(o *sdktest.Outcome) error {
			if o.PlanDigest != planned {
				return fmt.Errorf("fresh plan %s, approved %s", o.PlanDigest, planned)
			}
			return nil
		})},
		{Op: sdk.OpPlan, Config: map[string]any{"text": "b"}},
		// The config changed after the plan: the fresh plan is another.
		{ApprovedPlan: true, Config: map[string]any{"text": "c"}, ExpectError: regexp.MustCompile(`plan changed since approval`), Check: out("saved:a")},
	}})
	if msg != "" {
		t.Fatal(msg)
	}
}

// adopter imports the resource named by its import id into its versioned
// state (ImportResponse.State); Plan compares the config's "name" with it.
type adopter struct{ saver }

func (adopter) StateVersion() int { return 2 }
func (adopter) UpgradeState(_ context.Context, req *sdk.UpgradeStateRequest) (*sdk.UpgradeStateResponse, error) {
	return &sdk.UpgradeStateResponse{State: req.State}, nil
}
func (adopter) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	var st struct{ Name string }
	if _, err := sdk.LoadState(req.Job, &st); err != nil {
		return nil, err
	}
	if st.Name == req.Config["name"] {
		return &sdk.PlanResponse{}, nil
	}
	return &sdk.PlanResponse{PlannedChanges: []sdk.PlannedChange{{Address: "thing", Action: sdk.ActionUpdate}}}, nil
}
func (adopter) Import(_ context.Context, req *sdk.ImportRequest) (*sdk.ImportResponse, error) {
	if req.ID == "missing" {
		return nil, errors.New("no thing named missing")
	}
	return &sdk.ImportResponse{Outputs: map[string]string{"id": req.ID}, State: map[string]string{"Name": req.ID}}, nil
}

// An import step adopts a resource: the SDK keeps the State Import
// returns at the plugin's state version, and the next plan sees it; a
// plugin without Importer is refused by the host, naming its type.
func TestHarnessImport(t *testing.T) {
	cfg := map[string]any{"name": "web"}
	msg := harness(t, adopter{}, sdktest.Case{SkipDestroy: true, Steps: []sdktest.Step{
		{Op: sdk.OpImport, ImportID: "missing", Config: cfg, ExpectError: regexp.MustCompile("no thing named missing")},
		{Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectPlannedChange(sdk.ActionUpdate, "thing")},
		{Op: sdk.OpImport, ImportID: "web", Config: cfg, Check: sdktest.All(sdktest.ExpectOutput("id", "web"), func(o *sdktest.Outcome) error {
			b, err := os.ReadFile(filepath.Join(o.StateDir, sdk.StateFileName))
			if err != nil || string(b) != `{"version":2,"state":{"Name":"web"}}` {
				return fmt.Errorf("state file %s (%v)", b, err)
			}
			return nil
		})},
		{Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectNoPlannedChanges()},
	}})
	if msg != "" {
		t.Fatal(msg)
	}
	msg = harness(t, saver{}, sdktest.Case{Steps: []sdktest.Step{{Op: sdk.OpImport, ImportID: "web", Config: cfg}}})
	if !strings.Contains(msg, `component type "saver" does not implement import`) {
		t.Errorf("import without Importer: harness said %q", msg)
	}
}
