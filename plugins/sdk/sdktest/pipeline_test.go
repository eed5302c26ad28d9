package sdktest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// echo is a plugin that logs and outputs what its config and environment
// hold, and prints to stdout and stderr behind the SDK's back.
type echo struct{ seen map[string]any }

func (*echo) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "echo", Version: "1",
		ConfigSchema: `{"type":"object","additionalProperties":false,"properties":{"url":{"type":"string"},"region":{"type":"string"}}}`}, nil
}
func (*echo) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}
func (*echo) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	return &sdk.PlanResponse{PlannedChanges: []sdk.PlannedChange{{Address: "url", Action: sdk.ActionCreate,
		After: map[string]any{"url": req.Config["url"]}, Summary: fmt.Sprint(req.Config["url"])}}}, nil
}
func (e *echo) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	e.seen = req.Config
	req.Log.Stdout("url " + fmt.Sprint(req.Config["url"]))
	fmt.Println("printed", req.Env["TOKEN"])
	log.Print("logged to stderr")
	fmt.Fprintln(os.Stderr, "raw stderr")
	return &sdk.ApplyResponse{Outputs: map[string]string{"token": req.Env["TOKEN"], "region": fmt.Sprint(req.Config["region"])}}, nil
}

// sdktest runs the agent's config pipeline (issue 29): reserved keys are
// taken out before the schema check, listed secrets and inputs are filled
// in, the secrets and sensitive values are redacted from what the step
// returns, and what the plugin prints is in Outcome.Logs.
func TestHarnessRunsTheAgentsConfigPipeline(t *testing.T) {
	p := &echo{}
	cfg := map[string]any{
		"url":             "https://{{ .secrets.TOKEN }}@example.com",
		"region":          "{{ .inputs.region }}",
		"secrets":         []any{"TOKEN"},
		"customer_inputs": []any{"region"},
		"sensitive":       []any{"eu-west-9"},
	}
	msg := harness(t, p, sdktest.Case{
		Secrets: map[string]string{"TOKEN": "s3cr3t-token"},
		Inputs:  map[string]string{"region": "eu-west-9"},
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: cfg, Check: func(o *sdktest.Outcome) error {
				if s := o.Result.PlannedChanges[0].Summary; s != "https://***@example.com" {
					return fmt.Errorf("planned change summary %q, want the secret redacted", s)
				}
				return nil
			}},
			{Config: cfg, Check: sdktest.All(
				sdktest.ExpectLog("url https://***@example.com"),
				sdktest.ExpectLog("[plugin stdout] printed ***"),
				sdktest.ExpectLog("[plugin stderr] raw stderr"),
				sdktest.ExpectLog("logged to stderr"),
				sdktest.ExpectNoLog("s3cr3t"),
				sdktest.ExpectOutput("token", "***"),
				sdktest.ExpectOutput("region", "***"),
			)},
			{Config: map[string]any{"url": "{{ .secrets.OTHER }}", "secrets": []any{"OTHER"}},
				ExpectError: regexp.MustCompile(`config.secrets\[0\]: secret "OTHER" is not defined on this agent \(Case.Secrets\)`)},
		},
	})
	if msg != "" {
		t.Fatal(msg)
	}
	if p.seen["url"] != "https://s3cr3t-token@example.com" || p.seen["region"] != "eu-west-9" {
		t.Errorf("the plugin saw %v", p.seen)
	}
	for _, k := range []string{"secrets", "customer_inputs", "sensitive"} {
		if _, ok := p.seen[k]; ok {
			t.Errorf("the plugin saw the reserved key %q", k)
		}
	}
}

// A plugin whose schema declares a reserved key fails the harness at
// once, naming the key.
func TestHarnessRefusesReservedKey(t *testing.T) {
	msg := harness(t, &reservedPlugin{}, sdktest.Case{Steps: []sdktest.Step{{Config: map[string]any{}}}})
	if !strings.Contains(msg, `"secrets" is a reserved config key`) {
		t.Fatalf("harness: %q", msg)
	}
}

type reservedPlugin struct{ echo }

func (*reservedPlugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "r", Version: "1", ConfigSchema: `{"type":"object","properties":{"secrets":{"type":"array"}}}`}, nil
}

// versioned keeps a counter as its state; version 1 kept it as a string
// under "n", version 2 as a number under "count".
type versioned struct{ echo }

func (*versioned) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "versioned", Version: "2"}, nil
}
func (*versioned) StateVersion() int { return 2 }
func (*versioned) UpgradeState(_ context.Context, req *sdk.UpgradeStateRequest) (*sdk.UpgradeStateResponse, error) {
	var old struct {
		N string `json:"n"`
	}
	if err := json.Unmarshal(req.State, &old); err != nil || req.Version != 1 {
		return nil, fmt.Errorf("version %d: %v", req.Version, err)
	}
	n, err := strconv.Atoi(old.N)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(map[string]int{"count": n})
	return &sdk.UpgradeStateResponse{State: b}, nil
}
func (*versioned) Apply(_ context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	var st struct {
		Count int `json:"count"`
	}
	if _, err := sdk.LoadState(req.Job, &st); err != nil {
		return nil, err
	}
	st.Count++
	return &sdk.ApplyResponse{Outputs: map[string]string{"count": strconv.Itoa(st.Count)}}, sdk.SaveState(req.Job, st)
}

// The SDK keeps a plugin's state with its version and upgrades state
// saved at an older version before the operation runs (build item 3).
func TestStateUpgrade(t *testing.T) {
	var dir string
	msg := harness(t, &versioned{}, sdktest.Case{Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Config: map[string]any{}, Check: func(o *sdktest.Outcome) error {
			dir = o.StateDir // a state saved by version 1 of the plugin
			return os.WriteFile(filepath.Join(dir, sdk.StateFileName), []byte(`{"version":1,"state":{"n":"41"}}`), 0o600)
		}},
		{Config: map[string]any{}, Check: sdktest.All(sdktest.ExpectOutput("count", "42"),
			sdktest.ExpectLog("upgrading the component's state from version 1 to 2"))},
		{Config: map[string]any{}, Check: sdktest.All(sdktest.ExpectOutput("count", "43"),
			sdktest.ExpectNoLog("upgrading"))},
	}})
	if msg != "" {
		t.Fatal(msg)
	}
	b, _ := os.ReadFile(filepath.Join(dir, sdk.StateFileName))
	if string(b) != `{"version":2,"state":{"count":43}}` {
		t.Errorf("saved state %s", b)
	}
}
