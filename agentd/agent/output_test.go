package agent_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// printer is a plugin that debugs with fmt.Println, as authors do, and
// can panic in a goroutine.
type printer struct{}

func (printer) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "printer", Version: "1"}, nil
}
func (printer) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}
func (printer) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{Changes: "create bucket b1\nupdate policy p (token " + req.Env["TOKEN"] + ")\n",
		PlannedChanges: []sdk.PlannedChange{
			{Address: "bucket.b1", Action: sdk.ActionCreate, After: map[string]any{"name": "b1"}, Summary: "new bucket"},
			{Address: "policy.p", Action: sdk.ActionUpdate, Summary: "token " + req.Env["TOKEN"],
				Before: map[string]any{"rules": 1.0, "key": "k1", "same": true}, After: map[string]any{"rules": 2.0, "key": "k2", "same": true, "note": "uses " + req.Env["TOKEN"]},
				Sensitive: []string{"key"}},
		}}, nil
}
func (printer) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	fmt.Println("debug: token is " + req.Env["TOKEN"])
	fmt.Fprintln(os.Stderr, "debug on stderr")
	if req.Config["panic"] == true {
		go func() { panic("lost " + req.Env["TOKEN"]) }()
		select {}
	}
	return &sdk.ApplyResponse{}, nil
}

func (printer) Drift(context.Context, *sdk.DriftRequest) (*sdk.DriftResponse, error) {
	return &sdk.DriftResponse{Drifted: true, Changes: "bucket b1: versioning off, want on"}, nil
}

func runPrinter(t *testing.T, config map[string]any) (agent.Outcome, string) {
	t.Helper()
	return runPrinterOp(t, sdk.OpApply, config)
}

func runPrinterOp(t *testing.T, op string, config map[string]any) (agent.Outcome, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:   &pluginhost.Loader{SelfExe: self, Builtins: []string{"printer"}},
		WorkRoot: t.TempDir(),
		Secrets:  map[string]string{"TOKEN": "tok-7f3a9c-secret"},
	}
	t.Cleanup(func() { r.Close() })
	config["secrets"] = []any{"TOKEN"}
	var l logs
	out := r.Run(t.Context(), agent.Job{ID: "job1", InstallID: "ins1", Attempt: 1, ComponentType: "printer",
		Operation: op, Config: config, Timeout: time.Minute},
		func(stream int32, text string) {
			if stream != agent.StreamSystem {
				t.Errorf("plugin output on stream %d: %q", stream, text)
			}
			l.add(stream, text)
		})
	return out, l.String()
}

// What a plugin prints to stdout and stderr reaches the job's log on the
// system stream, redacted; a panic in a goroutine arrives with its stack.
func TestPluginOutputInJobLog(t *testing.T) {
	out, log := runPrinter(t, map[string]any{})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("outcome %v: %s\n%s", out.Outcome, out.Error, log)
	}
	for _, want := range []string{"[plugin stdout] debug: token is ***", "[plugin stderr] debug on stderr"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	out, log = runPrinter(t, map[string]any{"panic": true})
	if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "plugin printer exited during apply: exit status 2") {
		t.Errorf("outcome %v %q", out.Outcome, out.Error)
	}
	for _, want := range []string{"[plugin stderr] panic: lost ***", "[plugin stderr] goroutine ", "output_test.go:"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "tok-7f3a9c-secret") {
		t.Errorf("the secret leaked:\n%s", log)
	}
}

// A plan's changes and a drift check's verdict reach the job log (the
// agent protocol carries no plan yet), redacted.
func TestPlanAndDriftInJobLog(t *testing.T) {
	out, log := runPrinterOp(t, sdk.OpPlan, map[string]any{})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED ||
		!strings.Contains(log, "[agentd] changes: create bucket b1\n[agentd] changes: update policy p (token ***)") ||
		!strings.Contains(log, "[agentd] plan: create bucket.b1: new bucket\n[agentd] plan: update policy.p: token *** (changed: key, note, rules)") {
		t.Errorf("plan: %v %s\n%s", out.Outcome, out.Error, log)
	}
	// The changes go back to imsd as data too, redacted.
	if pc := out.PlannedChanges; len(pc) != 2 || pc[1].Summary != "token ***" || pc[1].After.GetStructValue().GetFields()["note"].GetStringValue() != "uses ***" ||
		pc[1].After.GetStructValue().GetFields()["key"].GetStringValue() != sdk.MaskedChanged || pc[0].Before != nil || pc[0].Action != "create" {
		t.Errorf("planned changes: %v", pc)
	}
	out, log = runPrinterOp(t, sdk.OpDrift, map[string]any{})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED ||
		!strings.Contains(log, "[agentd] drift check: drifted\n[agentd] changes: bucket b1: versioning off, want on") {
		t.Errorf("drift: %v %s\n%s", out.Outcome, out.Error, log)
	}
}
