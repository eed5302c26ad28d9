package terraform_test

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
	"github.com/byoc-dev/byoc/plugins/terraform"
)

// An import runs terraform import per ADDR=ID pair: the object joins the
// component's state with its outputs, the next plan changes nothing, and
// a plan of another config shows what differs.
// A malformed import id or an address the module lacks fails the job.
func TestImport(t *testing.T) {
	env, _ := setup(t)
	abs, _ := filepath.Abs(filepath.Join("testdata", "adopt"))
	cfg := map[string]any{"module_dir": abs, "vars": map[string]any{"at": "2020-05-04T10:00:00Z"}}
	later := map[string]any{"module_dir": abs, "vars": map[string]any{"at": "2021-01-01T00:00:00Z"}}
	sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, Component: "clock", SkipDestroy: true, Steps: []sdktest.Step{
		{Name: "malformed id", Op: sdk.OpImport, ImportID: "time_static.created", Config: cfg,
			ExpectError: regexp.MustCompile(`import id: pair 1 "time_static.created": want ADDR=ID`)},
		{Name: "unknown address", Op: sdk.OpImport, ImportID: "time_static.nope=2020-05-04T10:00:00Z", Config: cfg,
			ExpectError: regexp.MustCompile(`time_static.nope`)},
		{Name: "import", Op: sdk.OpImport, ImportID: "time_static.created=2020-05-04T10:00:00Z", Config: cfg, Check: sdktest.All(
			sdktest.ExpectLog("terraform: importing 2020-05-04T10:00:00Z as time_static.created"),
			sdktest.ExpectOutput("year", "2020"))},
		{Name: "plan: no change", Op: sdk.OpPlan, Config: cfg, Check: sdktest.ExpectNoPlannedChanges()},
		{Name: "plan with another config", Op: sdk.OpPlan, Config: later, Check: sdktest.ExpectPlannedChange(sdk.ActionReplace, "time_static.created")},
	}})
}

// noOldClocks denies adopting a clock from before 2021 (input.changes of
// an import: each object adopted, its values in after).
const noOldClocks = `package customer.adopt

deny contains msg if {
	input.operation == "import"
	some c in input.changes
	c.action == "import"
	c.after.year < 2021
	msg := sprintf("%s: a clock of %d is not adopted", [c.address, c.after.year])
}

warn contains msg if {
	some c in input.changes
	msg := sprintf("%s adopted (%s)", [c.address, c.action])
}
`

// An import is put through the job's policies before anything joins the
// state: a customer deny fails it with the policy named and adopts
// nothing (the next plan still creates the object); an import the
// policies allow adopts, its warnings returned.
func TestImportPolicies(t *testing.T) {
	env, _ := setup(t)
	abs, _ := filepath.Abs(filepath.Join("testdata", "adopt"))
	old := map[string]any{"module_dir": abs, "vars": map[string]any{"at": "2020-05-04T10:00:00Z"}}
	later := map[string]any{"module_dir": abs, "vars": map[string]any{"at": "2021-01-01T00:00:00Z"}}
	policies := []sdk.PolicyModule{{Name: "/etc/byoc/policies/adopt.rego", Source: sdk.PolicySourceCustomer, Rego: noOldClocks}}
	sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, Component: "clock", SkipDestroy: true, Steps: []sdktest.Step{
		{Name: "address not one", Op: sdk.OpImport, ImportID: "time_static.created}\nresource x y {=2020", Config: old, Policies: policies,
			ExpectError: regexp.MustCompile(`is not a resource address`)},
		{Name: "import denied", Op: sdk.OpImport, ImportID: "time_static.created=2020-05-04T10:00:00Z", Config: old, Policies: policies,
			ExpectError: regexp.MustCompile(`^denied by policy: time_static\.created: a clock of 2020 is not adopted \(customer policy /etc/byoc/policies/adopt\.rego\)$`),
			Check: sdktest.All(
				expectFinding(sdk.PolicyDeny, sdk.PolicySourceCustomer, "time_static.created: a clock of 2020 is not adopted"),
				sdktest.ExpectNoLog("terraform: importing"))},
		{Name: "nothing adopted", Op: sdk.OpPlan, Config: old, Check: sdktest.ExpectPlannedChange(sdk.ActionCreate, "time_static.created")},
		{Name: "import allowed", Op: sdk.OpImport, ImportID: "time_static.created=2021-01-01T00:00:00Z", Config: later, Policies: policies, Check: sdktest.All(
			expectFinding(sdk.PolicyWarn, sdk.PolicySourceCustomer, "time_static.created adopted (import)"),
			sdktest.ExpectOutput("year", "2021"))},
		{Name: "plan: no change", Op: sdk.OpPlan, Config: later, Check: sdktest.ExpectNoPlannedChanges()},
	}})
}
