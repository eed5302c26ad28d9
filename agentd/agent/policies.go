package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// VendorPoliciesKey is the top-level config key under which imsd carries
// the vendor's policies (the app config's policies.toml, those for the
// component's type) with a component's plan, apply or destroy job: a list
// of {"name": FILE, "rego": TEXT}. The config is signed, so they are what
// imsd sent. The agent removes the key before the plugin sees the config
// and hands the policies over as JobContext.Policies, source "vendor"
// whatever the list says.
const VendorPoliciesKey = jobconfig.VendorPoliciesKey

// policyOps are the operations whose plans policies check: an import
// too, so that adopting a resource is no way around them.
var policyOps = []string{sdk.OpPlan, sdk.OpApply, sdk.OpDestroy, sdk.OpPlanDestroy, sdk.OpImport}

// CustomerPolicies reads the customer's policies: every *.rego file in
// dir (not below it), by name. They are read again for every job, so a
// change applies to the next job without a restart. A file or a directory
// that others than its owner may write is refused, like a plugin binary:
// whoever can change or remove a policy can let anything through.
func CustomerPolicies(dir string) ([]sdk.PolicyModule, error) {
	if dir == "" {
		return nil, nil
	}
	// Whoever may write the directory may remove a policy from it.
	di, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("customer policies (--policy-dir): %w", err)
	}
	if di.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("customer policies (--policy-dir) %s: refused: writable by group or others (mode %04o); chmod go-w it", dir, di.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("customer policies (--policy-dir): %w", err)
	}
	var out []sdk.PolicyModule
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".rego") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("customer policy %s: %w", path, err)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("customer policy %s: refused: writable by group or others (mode %04o); chmod go-w it", path, fi.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("customer policy %s: %w", path, err)
		}
		out = append(out, sdk.PolicyModule{Name: path, Source: sdk.PolicySourceCustomer, Rego: string(b)})
	}
	return out, nil
}

// findingsToProto converts a plugin's policy findings for the job result.
func findingsToProto(fs []sdk.PolicyFinding) []*agentv1.PolicyFinding {
	var out []*agentv1.PolicyFinding
	for _, f := range fs {
		out = append(out, &agentv1.PolicyFinding{Policy: f.Policy, Source: f.Source, Level: f.Level, Message: f.Message})
	}
	return out
}

func hasDeny(fs []sdk.PolicyFinding) bool {
	return slices.ContainsFunc(fs, func(f sdk.PolicyFinding) bool { return f.Level == sdk.PolicyDeny })
}
