// Command gatedplugin is a test plugin (byoc-plugin-gated) that puts its
// plans through the policy gate as the terraform and helm types do: its
// config lists the changes a plan would make ({"changes": [{"address":
// "...", "action": "..."}]}); plan and apply evaluate the job's policies
// against them, and apply "applies" only when no policy denies; an
// import "adopts" them (action import) only when no policy denies.
package main

import (
	"context"

	"github.com/byoc-dev/byoc/plugins/policy"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

type gated struct{}

func (gated) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "gated", Version: "0.1.0", EvaluatesPolicies: true}, nil
}

func (gated) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}

func changes(cfg map[string]any) []sdk.PlannedChange {
	var out []sdk.PlannedChange
	list, _ := cfg["changes"].([]any)
	for _, c := range list {
		m, _ := c.(map[string]any)
		a, _ := m["address"].(string)
		act, _ := m["action"].(string)
		out = append(out, sdk.PlannedChange{Address: a, Action: act, Summary: act + " " + a})
	}
	return out
}

func (gated) Plan(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	ch := changes(req.Config)
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpPlan, ch, nil))
	return &sdk.PlanResponse{PlannedChanges: ch, PolicyFindings: fs}, err
}

func (gated) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpApply, changes(req.Config), nil))
	if err != nil {
		return &sdk.ApplyResponse{PolicyFindings: fs}, err
	}
	req.Log.Stdout("applied")
	return &sdk.ApplyResponse{PolicyFindings: fs, Outputs: map[string]string{"mode": req.Job.Mode}}, nil
}

func (gated) Destroy(context.Context, *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	return &sdk.DestroyResponse{}, nil
}

func (gated) Import(ctx context.Context, req *sdk.ImportRequest) (*sdk.ImportResponse, error) {
	var ch []sdk.PlannedChange
	for _, c := range changes(req.Config) {
		ch = append(ch, sdk.PlannedChange{Address: c.Address, Action: sdk.ActionImport})
	}
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpImport, ch, nil))
	if err != nil {
		return &sdk.ImportResponse{PolicyFindings: fs}, err
	}
	req.Log.Stdout("adopted " + req.ID)
	return &sdk.ImportResponse{PolicyFindings: fs, Outputs: map[string]string{"id": req.ID}}, nil
}

func main() { sdk.Serve(gated{}) }
