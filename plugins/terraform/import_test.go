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
