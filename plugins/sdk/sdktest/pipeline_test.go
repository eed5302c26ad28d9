package sdktest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"regexp"
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
