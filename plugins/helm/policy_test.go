package helm

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/release"

	"github.com/byoc-dev/byoc/plugins/policy/examples"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// vendorPolicy denies a forbidden greeting in the rendered manifests
// (input.plan.manifests) and warns about every Service.
const vendorPolicy = `package vendor.greetings

deny contains msg if {
	some m in input.plan.manifests
	m.kind == "ConfigMap"
	m.data.greeting == "forbidden"
	msg := sprintf("%s/%s greets %q", [m.kind, m.metadata.name, m.data.greeting])
}

warn contains msg if {
	some c in input.changes
	startswith(c.address, "Service/")
	msg := sprintf("%s %s: Services are reviewed by hand", [c.action, c.address])
}
`

// TestPolicyGate: vendor and customer rego policies (plugins/policy)
// see the rendered manifests and the per-object changes before anything
// is applied; deny fails the plan or apply and changes nothing, warn is
// logged and returned.
func TestPolicyGate(t *testing.T) {
	f := newFakeCluster(t)
	vendor := sdk.PolicyModule{Name: "policies/greetings.rego", Source: sdk.PolicySourceVendor, Rego: vendorPolicy}
	customer := sdk.PolicyModule{Name: "/etc/byoc/policies/maintenance.rego", Source: sdk.PolicySourceCustomer, Rego: examples.Maintenance}
	policies := []sdk.PolicyModule{vendor, customer}
	revision := func(want int) sdktest.Check {
		return func(*sdktest.Outcome) error {
			rel, err := f.releases.Last("web")
			if err != nil {
				return err
			}
			if rel.Version != want {
				return fmt.Errorf("release at revision %d, want %d", rel.Version, want)
			}
			return nil
		}
	}
	findings := func(want ...string) sdktest.Check {
		return func(o *sdktest.Outcome) error {
			var got []string
			for _, f := range o.Result.PolicyFindings {
				got = append(got, f.String())
			}
			for _, w := range want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					return fmt.Errorf("no finding %q in %q", w, got)
				}
			}
			return nil
		}
	}
	sdktest.Test(t, f.plugin(), sdktest.Case{
		SkipDestroy: true,
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Mode: "provision", Policies: policies, Config: webConfig(map[string]any{"extra": true}), Check: sdktest.All(
				sdktest.ExpectChanges("4 to create"),
				sdktest.ExpectLog("policy warn [vendor] policies/greetings.rego: create Service/default/web: Services are reviewed by hand"),
				findings("warn [vendor] policies/greetings.rego: create Service/default/web"),
			)},
			{Name: "install", Mode: "provision", Policies: policies, Config: webConfig(map[string]any{"extra": true}), Check: sdktest.All(
				sdktest.ExpectOutput("revision", "1"), findings("Services are reviewed by hand"))},
			{Name: "vendor deny", Policies: policies, Config: webConfig(map[string]any{"extra": true, "greeting": "forbidden"}),
				ExpectError: regexp.MustCompile(`ConfigMap/web-config greets "forbidden"`),
				Check:       sdktest.All(revision(1), findings(`deny [vendor] policies/greetings.rego: ConfigMap/web-config greets "forbidden"`))},
			{Name: "plan denied too", Op: sdk.OpPlan, Policies: policies, Config: webConfig(map[string]any{"extra": true, "greeting": "forbidden"}),
				ExpectError: regexp.MustCompile(`greets "forbidden"`)},
			{Name: "customer deny: no deletes in maintenance", Mode: "maintenance", Policies: policies, Config: webConfig(nil),
				ExpectError: regexp.MustCompile(`maintenance mode: ConfigMap/default/web-extra would be deleted \(delete\)`),
				Check:       revision(1)},
			{Name: "the same change in provision mode", Mode: "provision", Policies: policies, Config: webConfig(nil),
				Check: revision(2)},
			{Name: "destroy in maintenance", Op: sdk.OpDestroy, Mode: "maintenance", Policies: policies, Config: webConfig(nil),
				ExpectError: regexp.MustCompile(`maintenance mode: ConfigMap/default/web-config would be deleted`),
				Check:       revision(2)},
			{Name: "destroy in deprovision", Op: sdk.OpDestroy, Mode: "deprovision", Policies: policies, Config: webConfig(nil)},
		},
	})
}

// TestDestroyOfAFailedReleaseIsGated: an uninstall deletes the objects of
// the release's last revision, deployed or failed; a destroy is gated on
// them even when no revision is deployed (it used to pass the policies
// then: the gate looked only at the deployed revision).
func TestDestroyOfAFailedReleaseIsGated(t *testing.T) {
	f := newFakeCluster(t)
	customer := sdk.PolicyModule{Name: "/etc/byoc/policies/maintenance.rego", Source: sdk.PolicySourceCustomer, Rego: examples.Maintenance}
	policies := []sdk.PolicyModule{customer}
	sdktest.Test(t, f.plugin(), sdktest.Case{
		SkipDestroy: true,
		Steps:       []sdktest.Step{{Name: "install", Mode: "provision", Policies: policies, Config: webConfig(nil)}},
	})
	last, err := f.releases.Last("web")
	if err != nil {
		t.Fatal(err)
	}
	last.SetStatus(release.StatusFailed, "the install failed half-way")
	if err := f.releases.Update(last); err != nil {
		t.Fatal(err)
	}
	if d, err := f.releases.Deployed("web"); err == nil {
		t.Fatalf("revision %d still deployed", d.Version)
	}
	sdktest.Test(t, f.plugin(), sdktest.Case{
		SkipDestroy: true,
		Steps: []sdktest.Step{
			{Name: "destroy in maintenance", Op: sdk.OpDestroy, Mode: "maintenance", Policies: policies, Config: webConfig(nil),
				ExpectError: regexp.MustCompile(`maintenance mode: ConfigMap/default/web-config would be deleted`)},
			{Name: "destroy in deprovision", Op: sdk.OpDestroy, Mode: "deprovision", Policies: policies, Config: webConfig(nil)},
		},
	})
	if _, err := f.releases.Last("web"); err == nil {
		t.Fatal("the release is still there after the destroy in deprovision mode")
	}
}
