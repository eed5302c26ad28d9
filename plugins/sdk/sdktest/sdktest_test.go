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
