package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/policy"
	"github.com/byoc-dev/byoc/plugins/policy/examples"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// gated plans the changes its config lists ({"changes": [{"address",
// "action"}]}) and puts them through the policy gate before "applying",
// as the terraform and helm types do. It fails if the vendor's policies
// reach it in the config.
type gated struct{}

func (gated) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "gated", Version: "1", EvaluatesPolicies: true}, nil
}

func (gated) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	if _, ok := req.Config[agent.VendorPoliciesKey]; ok {
		return &sdk.ValidateResponse{Diagnostics: []sdk.Diagnostic{{Field: agent.VendorPoliciesKey, Message: "reached the plugin"}}}, nil
	}
	return &sdk.ValidateResponse{}, nil
}

func (gated) changes(cfg map[string]any) []sdk.PlannedChange {
	var out []sdk.PlannedChange
	list, _ := cfg["changes"].([]any)
	for _, c := range list {
		m, _ := c.(map[string]any)
		a, _ := m["address"].(string)
		act, _ := m["action"].(string)
		out = append(out, sdk.PlannedChange{Address: a, Action: act})
	}
	return out
}

func (g gated) Plan(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	ch := g.changes(req.Config)
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpPlan, ch, nil))
	return &sdk.PlanResponse{PlannedChanges: ch, PolicyFindings: fs}, err
}

func (g gated) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpApply, g.changes(req.Config), nil))
	if err != nil {
		return &sdk.ApplyResponse{PolicyFindings: fs}, err
	}
	// The component and mode arrive with the job.
	return &sdk.ApplyResponse{PolicyFindings: fs, Outputs: map[string]string{"applied": "yes", "component": req.Job.Component, "mode": req.Job.Mode}}, nil
}

// Import adopts what its config lists, each an input.changes entry of
// action import, through the gate as the terraform type does.
func (g gated) Import(ctx context.Context, req *sdk.ImportRequest) (*sdk.ImportResponse, error) {
	var ch []sdk.PlannedChange
	for _, c := range g.changes(req.Config) {
		ch = append(ch, sdk.PlannedChange{Address: c.Address, Action: sdk.ActionImport})
	}
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpImport, ch, nil))
	if err != nil {
		return &sdk.ImportResponse{PolicyFindings: fs}, err
	}
	return &sdk.ImportResponse{PolicyFindings: fs, Outputs: map[string]string{"imported": req.ID}}, nil
}

func writePolicy(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func runGated(t *testing.T, policyDir, typ, mode string, config map[string]any) (agent.Outcome, string) {
	t.Helper()
	return runGatedOp(t, policyDir, typ, sdk.OpApply, mode, config)
}

func runGatedOp(t *testing.T, policyDir, typ, op, mode string, config map[string]any) (agent.Outcome, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:    &pluginhost.Loader{SelfExe: self, Builtins: []string{"action", "gated"}},
		WorkRoot:  t.TempDir(),
		PolicyDir: policyDir,
	}
	var mu sync.Mutex
	var b strings.Builder
	out := r.Run(t.Context(), agent.Job{ID: "job1", InstallID: "ins1", Attempt: 1, ComponentType: typ,
		Operation: op, Config: config, Timeout: time.Minute, Mode: mode, Component: "db"},
		func(_ int32, text string) {
			mu.Lock()
			b.WriteString(text + "\n")
			mu.Unlock()
		})
	return out, b.String()
}

// TestPolicyGate runs real plugin processes with the customer's policies
// from a policy dir and the vendor's from the job's config.
func TestPolicyGate(t *testing.T) {
	dir := t.TempDir()
	maint := writePolicy(t, dir, "maintenance.rego", examples.Maintenance, 0o600)
	writePolicy(t, dir, "README.txt", "not a policy", 0o644)
	vendorWarn := map[string]any{"name": "policies/warn.rego", "rego": "package vendor.w\nwarn contains \"vendor looked\"\n"}
	// A vendor entry claiming to be the customer's is the vendor's.
	vendorLies := map[string]any{"name": maint, "source": "customer", "rego": "package byoc.examples.maintenance\ndeny := set()\n"}
	del := []any{map[string]any{"address": "aws_s3_bucket.logs", "action": "delete"}}
	create := []any{map[string]any{"address": "aws_s3_bucket.new", "action": "create"}}

	t.Run("customer deny blocks the apply", func(t *testing.T) {
		out, log := runGated(t, dir, "gated", "maintenance", map[string]any{"changes": del,
			agent.VendorPoliciesKey: []any{vendorWarn}})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "denied by policy: maintenance mode: aws_s3_bucket.logs would be deleted") {
			t.Fatalf("outcome %v, error %q", out.Outcome, out.Error)
		}
		if out.Outputs["applied"] != "" {
			t.Fatal("applied despite the denial")
		}
		want := []string{"deny customer " + maint, "warn vendor policies/warn.rego"}
		if got := findingKeys(out.PolicyFindings); !slices.Equal(got, want) {
			t.Fatalf("findings %v, want %v", got, want)
		}
		if !strings.Contains(log, "[agentd] policies: customer "+maint+", vendor policies/warn.rego") ||
			!strings.Contains(log, "policy deny [customer] "+maint+": maintenance mode") {
			t.Fatalf("log:\n%s", log)
		}
	})
	t.Run("the vendor cannot switch a customer policy off", func(t *testing.T) {
		out, _ := runGated(t, dir, "gated", "maintenance", map[string]any{"changes": del,
			agent.VendorPoliciesKey: []any{vendorLies}})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || len(out.PolicyFindings) != 1 || out.PolicyFindings[0].GetSource() != "customer" {
			t.Fatalf("outcome %v %q, findings %v", out.Outcome, out.Error, out.PolicyFindings)
		}
	})
	t.Run("an import is gated too", func(t *testing.T) {
		// The customer's and the vendor's policies reach an import job
		// as they reach an apply: choosing the import path is no way
		// around them.
		noAdopt := map[string]any{"name": "policies/noadopt.rego",
			"rego": "package vendor.na\ndeny contains msg if { some c in input.changes; c.action == \"import\"; msg := sprintf(\"%s may not be adopted\", [c.address]) }\n"}
		out, log := runGatedOp(t, dir, "gated", sdk.OpImport, "maintenance", map[string]any{"changes": del, "import_id": "logs",
			agent.VendorPoliciesKey: []any{noAdopt, vendorWarn}})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "denied by policy: aws_s3_bucket.logs may not be adopted (vendor policy policies/noadopt.rego)") ||
			out.Outputs["imported"] != "" {
			t.Fatalf("outcome %v %q, outputs %v\n%s", out.Outcome, out.Error, out.Outputs, log)
		}
		if got := findingKeys(out.PolicyFindings); !slices.Equal(got, []string{"deny vendor policies/noadopt.rego", "warn vendor policies/warn.rego"}) {
			t.Fatalf("findings %v", got)
		}
		if !strings.Contains(log, "[agentd] policies: customer "+maint+", vendor policies/noadopt.rego, vendor policies/warn.rego") {
			t.Fatalf("log:\n%s", log)
		}
		out, _ = runGatedOp(t, dir, "gated", sdk.OpImport, "maintenance", map[string]any{"changes": del, "import_id": "logs",
			agent.VendorPoliciesKey: []any{vendorWarn}})
		if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || out.Outputs["imported"] != "logs" {
			t.Fatalf("allowed import: %v %q", out.Outcome, out.Error)
		}
	})
	t.Run("allowed in another mode, warn shown", func(t *testing.T) {
		out, _ := runGated(t, dir, "gated", "deprovision", map[string]any{"changes": del,
			agent.VendorPoliciesKey: []any{vendorWarn}})
		if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || out.Outputs["applied"] != "yes" || out.Outputs["mode"] != "deprovision" || out.Outputs["component"] != "db" {
			t.Fatalf("outcome %v %q, outputs %v", out.Outcome, out.Error, out.Outputs)
		}
		if got := findingKeys(out.PolicyFindings); !slices.Equal(got, []string{"warn vendor policies/warn.rego"}) {
			t.Fatalf("findings %v", got)
		}
	})
	t.Run("vendor deny", func(t *testing.T) {
		out, _ := runGated(t, dir, "gated", "provision", map[string]any{"changes": create,
			agent.VendorPoliciesKey: []any{map[string]any{"name": "policies/nocreate.rego",
				"rego": "package vendor.nc\ndeny contains msg if { some c in input.changes; c.action == \"create\"; msg := \"no creates\" }\n"}}})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "no creates (vendor policy policies/nocreate.rego)") {
			t.Fatalf("outcome %v %q", out.Outcome, out.Error)
		}
	})
	t.Run("a broken vendor policy names its file", func(t *testing.T) {
		out, _ := runGated(t, dir, "gated", "provision", map[string]any{"changes": create,
			agent.VendorPoliciesKey: []any{map[string]any{"name": "policies/broken.rego", "rego": "package p\ndeny contains msg if {\n"}}})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "vendor policy policies/broken.rego:") {
			t.Fatalf("outcome %v %q", out.Outcome, out.Error)
		}
	})
	t.Run("a type that does not evaluate says so", func(t *testing.T) {
		out, log := runGated(t, dir, "action", "maintenance", map[string]any{"steps": []any{map[string]any{"name": "s", "script": "true"}},
			agent.VendorPoliciesKey: []any{vendorWarn}})
		if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
			t.Fatalf("outcome %v %q", out.Outcome, out.Error)
		}
		if !strings.Contains(log, `[agentd] policies NOT evaluated: type "action" does not evaluate policies (customer `+maint) {
			t.Fatalf("log:\n%s", log)
		}
	})
	t.Run("a policy others may write is refused", func(t *testing.T) {
		bad := t.TempDir()
		p := writePolicy(t, bad, "open.rego", examples.Maintenance, 0o666)
		out, _ := runGated(t, bad, "gated", "maintenance", map[string]any{"changes": create})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "customer policy "+p+": refused: writable by group or others") {
			t.Fatalf("outcome %v %q", out.Outcome, out.Error)
		}
		if _, err := agent.CustomerPolicies(filepath.Join(bad, "missing")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("missing dir: %v", err)
		}
		open := t.TempDir()
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := agent.CustomerPolicies(open); err == nil || !strings.Contains(err.Error(), "refused: writable by group or others (mode 0777)") {
			t.Fatalf("a directory others may write: %v", err)
		}
	})
}

func findingKeys(fs []*agentv1.PolicyFinding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.GetLevel()+" "+f.GetSource()+" "+f.GetPolicy())
	}
	return out
}
