package terraform_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
	"github.com/byoc-dev/byoc/plugins/terraform"
)

// noFilesInMaintenance reads Terraform's own JSON plan (input.plan).
const noFilesInMaintenance = `package vendor.files

deny contains msg if {
	input.mode == "maintenance"
	some r in input.plan.resource_changes
	r.type == "local_file"
	"create" in r.change.actions
	msg := sprintf("%s: no new files in maintenance mode", [r.address])
}
`

// newObjects reads the planned changes (input.changes).
const newObjects = `package customer.audit

warn contains msg if {
	some c in input.changes
	c.action == "create"
	msg := sprintf("%s is new (%s)", [c.address, input.operation])
}
`

func expectFinding(level, source, message string) sdktest.Check {
	return func(o *sdktest.Outcome) error {
		for _, f := range o.Result.PolicyFindings {
			if f.Level == level && f.Source == source && f.Message == message {
				return nil
			}
		}
		return fmt.Errorf("no %s finding of a %s policy %q in %v", level, source, message, o.Result.PolicyFindings)
	}
}

// TestPolicyGate evaluates the plan with the job's policies before
// anything is applied: a vendor deny (on Terraform's JSON plan) fails
// plan and apply with the rule's message and applies nothing; a customer
// warn (on the planned changes) is logged and returned and blocks nothing.
func TestPolicyGate(t *testing.T) {
	env, _ := setup(t)
	site := t.TempDir()
	index := filepath.Join(site, "index.html")
	cfg := map[string]any{"module": moduleRef("site"), "vars": map[string]any{"name": "acme", "dir": site}}
	policies := []sdk.PolicyModule{
		{Name: "policies/files.rego", Source: sdk.PolicySourceVendor, Rego: noFilesInMaintenance},
		{Name: "/etc/byoc/policies/audit.rego", Source: sdk.PolicySourceCustomer, Rego: newObjects},
	}
	nothing := func(*sdktest.Outcome) error {
		if _, err := os.Stat(index); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %v, want nothing applied", index, err)
		}
		return nil
	}
	denied := regexp.MustCompile(`^denied by policy: local_file\.index: no new files in maintenance mode \(vendor policy policies/files\.rego\)$`)
	sdktest.Test(t, terraform.New(), sdktest.Case{Env: env, Steps: []sdktest.Step{
		{Name: "plan denied", Op: sdk.OpPlan, Config: cfg, Mode: "maintenance", Policies: policies, ExpectError: denied, Check: sdktest.All(
			expectFinding(sdk.PolicyDeny, sdk.PolicySourceVendor, "local_file.index: no new files in maintenance mode"),
			expectFinding(sdk.PolicyWarn, sdk.PolicySourceCustomer, "local_file.index is new (plan)"),
			sdktest.ExpectLog("policy deny [vendor] policies/files.rego: local_file.index: no new files in maintenance mode"),
		)},
		{Name: "apply denied", Config: cfg, Mode: "maintenance", Policies: policies, ExpectError: denied, Check: sdktest.All(
			expectFinding(sdk.PolicyDeny, sdk.PolicySourceVendor, "local_file.index: no new files in maintenance mode"),
			sdktest.ExpectNoLog("Creating..."),
			nothing,
		)},
		{Name: "apply warned", Config: cfg, Mode: "provision", Policies: policies, Check: sdktest.All(
			expectFinding(sdk.PolicyWarn, sdk.PolicySourceCustomer, "terraform_data.site is new (apply)"),
			sdktest.ExpectLog("policy warn [customer] /etc/byoc/policies/audit.rego: local_file.index is new (apply)"),
			sdktest.ExpectOutput("name", "acme"),
			expectFile(index, "hello acme"),
		)},
		{Name: "broken policy", Op: sdk.OpPlan, Config: cfg, Policies: []sdk.PolicyModule{{Name: "policies/broken.rego", Source: sdk.PolicySourceVendor, Rego: "package x\ndeny contains msg if {\n"}},
			ExpectError: regexp.MustCompile(`vendor policy policies/broken\.rego:\d+`)},
	}})
}
