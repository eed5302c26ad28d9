package workflow

import (
	"path"
	"slices"

	"github.com/byoc-dev/byoc/plugins/sdk/jobconfig"
	"github.com/byoc-dev/byoc/schema/app/config"
)

// VendorPoliciesKey is the top-level config key under which a component's
// plan, apply and destroy jobs carry the vendor's policies (policies.toml,
// those that apply to the component's type) to the agent: a list of
// {"name": FILE, "rego": TEXT}. The config is signed with the job, so the
// agent gets exactly these; it removes the key before the plugin sees the
// config and hands them over as vendor policies, evaluated apart from the
// customer's own. imsd only carries them: it evaluates nothing.
const VendorPoliciesKey = jobconfig.VendorPoliciesKey

// vendorPolicies lists the rego policies of app that apply to component
// type typ, in policies.toml's order. A policy with contents inline is
// named "policies.toml:NAME".
func vendorPolicies(app *config.App, typ string) []any {
	if app == nil {
		return nil
	}
	var out []any
	for _, p := range app.Policies.Policies {
		if p.Engine != "rego" || (len(p.AppliesTo) > 0 && !slices.Contains(p.AppliesTo, typ)) {
			continue
		}
		name, text := "policies.toml:"+p.Name, p.Contents
		if p.File != "" {
			name = path.Clean(p.File)
			text = string(app.Files[name])
		}
		out = append(out, map[string]any{"name": name, "rego": text})
	}
	return out
}
