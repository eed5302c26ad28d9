package policy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/byoc-dev/byoc/plugins/policy"
	"github.com/byoc-dev/byoc/plugins/policy/examples"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

const noDeletes = `package customer.nodeletes

deny contains msg if {
	some c in input.changes
	c.action == "delete"
	msg := sprintf("no deletes: %s", [c.address])
}

warn contains msg if {
	count(input.changes) > 1
	msg := "more than one change"
}
`

const vendorTags = `package vendor.tags

deny contains msg if {
	some c in input.changes
	c.action == "create"
	not c.after.tags.owner
	msg := sprintf("%s has no owner tag", [c.address])
}

warn contains msg if {
	input.mode == "break_glass"
	msg := "break-glass deploy"
}
`

func mod(name, source, rego string) sdk.PolicyModule {
	return sdk.PolicyModule{Name: name, Source: source, Rego: rego}
}

func input(mode string, changes ...sdk.PlannedChange) policy.Input {
	return policy.NewInput(sdk.JobContext{Mode: mode, InstallID: "inst_1", Component: "db"}, "terraform", sdk.OpApply, changes, nil)
}

func finding(policyName, source, level, msg string) sdk.PolicyFinding {
	return sdk.PolicyFinding{Policy: policyName, Source: source, Level: level, Message: msg}
}

func TestEvaluateDenyAndWarn(t *testing.T) {
	customer := mod("/etc/byoc/policies/nodeletes.rego", sdk.PolicySourceCustomer, noDeletes)
	vendor := mod("policies/tags.rego", sdk.PolicySourceVendor, vendorTags)
	create := sdk.PlannedChange{Address: "aws_s3_bucket.logs", Action: "create", After: map[string]any{"tags": map[string]any{}}}
	tagged := sdk.PlannedChange{Address: "aws_s3_bucket.ok", Action: "create", After: map[string]any{"tags": map[string]any{"owner": "x"}}}
	del := sdk.PlannedChange{Address: "aws_db_instance.main", Action: "delete", Before: map[string]any{}}
	tests := []struct {
		name string
		in   policy.Input
		want []sdk.PolicyFinding
	}{
		{"nothing to say", input("maintenance", tagged), nil},
		{"customer deny and warn", input("maintenance", tagged, del), []sdk.PolicyFinding{
			finding(customer.Name, "customer", "deny", "no deletes: aws_db_instance.main"),
			finding(customer.Name, "customer", "warn", "more than one change"),
		}},
		{"vendor deny", input("provision", create), []sdk.PolicyFinding{
			finding(vendor.Name, "vendor", "deny", "aws_s3_bucket.logs has no owner tag"),
		}},
		{"vendor warn from the mode", input("break_glass", tagged), []sdk.PolicyFinding{
			finding(vendor.Name, "vendor", "warn", "break-glass deploy"),
		}},
		{"both", input("provision", create, del), []sdk.PolicyFinding{
			finding(customer.Name, "customer", "deny", "no deletes: aws_db_instance.main"),
			finding(customer.Name, "customer", "warn", "more than one change"),
			finding(vendor.Name, "vendor", "deny", "aws_s3_bucket.logs has no owner tag"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{vendor, customer}, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, tt.want) {
				t.Fatalf("findings:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func equal(a, b []sdk.PolicyFinding) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestVendorCannotOverrideCustomer tries what an app config could do to a
// customer policy: the same package with a rule that conflicts, an empty
// deny, a helper the customer's rule uses, a module of the same name, and
// a module that claims to be the customer's package through an import.
// The customer's deny stands every time.
func TestVendorCannotOverrideCustomer(t *testing.T) {
	customer := mod("/etc/byoc/policies/nodeletes.rego", sdk.PolicySourceCustomer, `package customer.nodeletes

protected contains "aws_db_instance.main"

deny contains msg if {
	some c in input.changes
	c.action == "delete"
	c.address in protected
	msg := sprintf("no deletes: %s", [c.address])
}
`)
	del := input("maintenance", sdk.PlannedChange{Address: "aws_db_instance.main", Action: "delete"})
	want := finding(customer.Name, "customer", "deny", "no deletes: aws_db_instance.main")
	attacks := map[string]string{
		"same package, deny extended with nothing": `package customer.nodeletes
deny contains msg if { false; msg := "x" }`,
		"same package, helper emptied": `package customer.nodeletes
protected := set()`,
		"same package, default allow": `package customer.nodeletes
default allow := true`,
		"reads the customer's package": `package vendor.sneaky
warn contains msg if { some m in data.customer.nodeletes.deny; msg := m }`,
	}
	for name, rego := range attacks {
		t.Run(name, func(t *testing.T) {
			vendor := mod("policies/override.rego", sdk.PolicySourceVendor, rego)
			got, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{vendor, customer}, del)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != want {
				t.Fatalf("findings = %v, want only %v", got, want)
			}
			if policy.Denied(got) == nil {
				t.Fatal("not denied")
			}
		})
	}
	t.Run("a vendor module named like the customer's is still the vendor's", func(t *testing.T) {
		vendor := mod(customer.Name, sdk.PolicySourceVendor, `package customer.nodeletes
warn contains "vendor says hi"`)
		got, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{vendor, customer}, del)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0] != want || got[1].Source != "vendor" || got[1].Level != "warn" {
			t.Fatalf("findings = %v", got)
		}
	})
}

func TestMaintenanceExample(t *testing.T) {
	ex := mod("maintenance.rego", sdk.PolicySourceCustomer, examples.Maintenance)
	tests := []struct {
		name, mode string
		change     sdk.PlannedChange
		deny       string // a regexp; "" for no finding
	}{
		{"delete in maintenance", "maintenance", sdk.PlannedChange{Address: "aws_s3_bucket.logs", Action: "delete"}, `aws_s3_bucket.logs would be deleted \(delete\)`},
		{"replace in maintenance", "maintenance", sdk.PlannedChange{Address: "module.db.aws_db_instance.main[0]", Action: "replace"}, `would be deleted \(replace\)`},
		{"new IAM role in maintenance", "maintenance", sdk.PlannedChange{Address: "module.app.aws_iam_role.worker", Action: "create"}, `aws_iam_role.worker is a new IAM resource`},
		{"new RBAC role in maintenance", "maintenance", sdk.PlannedChange{Address: "ClusterRole//reader", Action: "create"}, `ClusterRole//reader is a new IAM resource`},
		{"update of an IAM role in maintenance", "maintenance", sdk.PlannedChange{Address: "aws_iam_role.worker", Action: "update"}, ""},
		{"new bucket in maintenance", "maintenance", sdk.PlannedChange{Address: "aws_s3_bucket.new", Action: "create"}, ""},
		{"delete in deprovision", "deprovision", sdk.PlannedChange{Address: "aws_s3_bucket.logs", Action: "delete"}, ""},
		{"new IAM role in provision", "provision", sdk.PlannedChange{Address: "aws_iam_role.worker", Action: "create"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{ex}, input(tt.mode, tt.change))
			if err != nil {
				t.Fatal(err)
			}
			if tt.deny == "" {
				if len(got) != 0 {
					t.Fatalf("findings = %v, want none", got)
				}
				return
			}
			if len(got) == 0 || got[0].Level != "deny" || !regexp.MustCompile(tt.deny).MatchString(got[0].Message) {
				t.Fatalf("findings = %v, want a deny matching %s", got, tt.deny)
			}
		})
	}
}

func TestRegoErrorsNameTheFile(t *testing.T) {
	good := mod("/etc/byoc/policies/ok.rego", sdk.PolicySourceCustomer, noDeletes)
	tests := []struct {
		name, file, source, rego string
		want                     string // regexp on the error
		line                     int
	}{
		{"parse error", "policies/broken.rego", "vendor", "package vendor.broken\n\ndeny contains msg if {\n\tmsg := \n}\n",
			`^vendor policy policies/broken\.rego:5: rego_parse_error: `, 5},
		{"v0 syntax", "/etc/byoc/policies/old.rego", "customer", "package old\n\ndeny[msg] {\n\tmsg := \"x\"\n}\n",
			`^customer policy /etc/byoc/policies/old\.rego:3: rego_parse_error: .*; /etc/byoc/policies/old\.rego is rego v0; write rules as .deny contains msg if`, 3},
		{"unsafe variable", "policies/unsafe.rego", "vendor", "package vendor.unsafe\n\ndeny contains msg if {\n\tx == 1\n\tmsg := \"y\"\n}\n",
			`^vendor policy policies/unsafe\.rego:4: rego_unsafe_var_error: var x is unsafe`, 4},
		{"http.send is not available", "policies/exfil.rego", "vendor", "package vendor.exfil\n\nwarn contains msg if {\n\tr := http.send({\"method\": \"get\", \"url\": \"http://example.com\"})\n\tmsg := r.body\n}\n",
			`^vendor policy policies/exfil\.rego:4: rego_type_error: undefined function http\.send`, 4},
		{"opa.runtime is not available", "policies/env.rego", "vendor", "package vendor.env\n\nwarn contains msg if {\n\tmsg := opa.runtime().env.HOME\n}\n",
			`^vendor policy policies/env\.rego:4: rego_type_error: undefined function opa\.runtime`, 4},
		{"empty", "policies/empty.rego", "vendor", "# nothing\n", `^vendor policy policies/empty\.rego: rego_parse_error: empty module$`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := mod(tt.file, tt.source, tt.rego)
			_, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{good, bad}, input("maintenance"))
			var ce *policy.CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *CompileError", err)
			}
			if !regexp.MustCompile(tt.want).MatchString(err.Error()) {
				t.Fatalf("err = %q, want it to match %s", err, tt.want)
			}
			if ce.Policy != tt.file || ce.Line != tt.line {
				t.Fatalf("policy, line = %s, %d; want %s, %d", ce.Policy, ce.Line, tt.file, tt.line)
			}
		})
	}
	t.Run("bad source", func(t *testing.T) {
		_, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{mod("x.rego", "imsd", noDeletes)}, input("maintenance"))
		if err == nil || !strings.Contains(err.Error(), `policies[0] (x.rego): source "imsd"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("deny that is not a set", func(t *testing.T) {
		_, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{mod("p.rego", "customer", "package p\ndeny := \"no\"\n")}, input("maintenance"))
		if err == nil || !strings.Contains(err.Error(), "customer policy p.rego: rule deny: must be a set of messages") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestEvaluateStopsWithTheContext(t *testing.T) {
	slow := mod("slow.rego", sdk.PolicySourceVendor, `package slow
warn contains msg if {
	some i in numbers.range(1, 100000000)
	i < 0
	msg := "never"
}`)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := policy.Evaluate(ctx, []sdk.PolicyModule{slow}, input("maintenance")); err == nil {
		t.Fatal("a cancelled evaluation succeeded")
	}
}

// gated is a plugin that plans one change from its config and puts it
// through the policy gate before applying, as terraform and helm do.
type gated struct{}

func (gated) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "gated", Version: "1", EvaluatesPolicies: true}, nil
}

func (gated) Validate(context.Context, *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	return &sdk.ValidateResponse{}, nil
}

func (gated) change(cfg map[string]any) []sdk.PlannedChange {
	action, _ := cfg["action"].(string)
	return []sdk.PlannedChange{{Address: "thing.one", Action: action}}
}

func (g gated) Plan(ctx context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	ch := g.change(req.Config)
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpPlan, ch, nil))
	return &sdk.PlanResponse{PlannedChanges: ch, PolicyFindings: fs}, err
}

var applied sync.Map

func (g gated) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	fs, err := policy.Gate(ctx, req.Job, req.Log, policy.NewInput(req.Job, "gated", sdk.OpApply, g.change(req.Config), nil))
	if err != nil {
		return &sdk.ApplyResponse{PolicyFindings: fs}, err
	}
	applied.Store(req.Job.JobID, true)
	return &sdk.ApplyResponse{PolicyFindings: fs}, nil
}

// TestGateThroughTheProtocol runs a gated plugin over the real gRPC
// protocol: the mode and policies reach it in the JobContext, and the
// findings come back in the result, with the denial as its error.
func TestGateThroughTheProtocol(t *testing.T) {
	ex := mod("/etc/byoc/policies/maintenance.rego", sdk.PolicySourceCustomer, examples.Maintenance)
	warn := mod("policies/warn.rego", sdk.PolicySourceVendor, "package vendor.w\nwarn contains \"looked at it\"\n")
	pols := []sdk.PolicyModule{ex, warn}
	hasFinding := func(level, msg string) sdktest.Check {
		return func(o *sdktest.Outcome) error {
			for _, f := range o.Result.PolicyFindings {
				if f.Level == level && strings.Contains(f.Message, msg) {
					if !strings.Contains(o.Log(), "policy "+level+" ["+f.Source+"] "+f.Policy+": ") {
						return errors.New("the finding is not in the log:\n" + o.Log())
					}
					return nil
				}
			}
			return errors.New("no " + level + " finding " + msg + " in " + sdkString(o.Result.PolicyFindings))
		}
	}
	sdktest.Test(t, gated{}, sdktest.Case{NoStateDir: true, Steps: []sdktest.Step{
		{Op: sdk.OpPlan, Mode: "maintenance", Policies: pols, Config: map[string]any{"action": "delete"},
			ExpectError: regexp.MustCompile(`denied by policy: maintenance mode: thing.one would be deleted .*\(customer policy /etc/byoc/policies/maintenance.rego\)`),
			Check:       hasFinding("deny", "thing.one would be deleted")},
		{Op: sdk.OpApply, Mode: "maintenance", Policies: pols, Config: map[string]any{"action": "delete"},
			ExpectError: regexp.MustCompile(`denied by policy`), Check: hasFinding("deny", "would be deleted")},
		{Op: sdk.OpApply, Mode: "deprovision", Policies: pols, Config: map[string]any{"action": "delete"},
			Check: hasFinding("warn", "looked at it")},
	}})
}

func sdkString(fs []sdk.PolicyFinding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "; ")
	}
	return b.String()
}

// TestExampleAppPolicy evaluates the vendor policy of the app that `byoc
// app init` writes against a Terraform plan.
func TestExampleAppPolicy(t *testing.T) {
	text, err := os.ReadFile("../../schema/app/load/example/policies/no_public_buckets.rego")
	if err != nil {
		t.Fatal(err)
	}
	plan := map[string]any{"resource_changes": []any{
		map[string]any{"address": "aws_s3_bucket_public_access_block.logs", "type": "aws_s3_bucket_public_access_block",
			"change": map[string]any{"after": map[string]any{"block_public_acls": false}}},
		map[string]any{"address": "aws_s3_bucket_public_access_block.ok", "type": "aws_s3_bucket_public_access_block",
			"change": map[string]any{"after": map[string]any{"block_public_acls": true}}},
	}}
	in := policy.NewInput(sdk.JobContext{Mode: "provision"}, "terraform", sdk.OpApply, nil, plan)
	got, err := policy.Evaluate(t.Context(), []sdk.PolicyModule{mod("policies/no_public_buckets.rego", "vendor", string(text))}, in)
	if err != nil {
		t.Fatal(err)
	}
	want := []sdk.PolicyFinding{finding("policies/no_public_buckets.rego", "vendor", "deny", "aws_s3_bucket_public_access_block.logs must block public ACLs")}
	if !equal(got, want) {
		t.Fatalf("findings %v, want %v", got, want)
	}
}

// BenchmarkEvaluate is the gate's cost for a plan of 1,000 changes with
// the maintenance example and a vendor policy: compile and evaluate, as
// each job does once.
func BenchmarkEvaluate(b *testing.B) {
	var changes []sdk.PlannedChange
	for i := range 1000 {
		changes = append(changes, sdk.PlannedChange{Address: fmt.Sprintf("aws_s3_bucket.b%d", i), Action: "create",
			After: map[string]any{"tags": map[string]any{"owner": "x"}}})
	}
	mods := []sdk.PolicyModule{mod("maintenance.rego", "customer", examples.Maintenance), mod("policies/tags.rego", "vendor", vendorTags)}
	in := input("maintenance", changes...)
	for b.Loop() {
		if _, err := policy.Evaluate(b.Context(), mods, in); err != nil {
			b.Fatal(err)
		}
	}
}
