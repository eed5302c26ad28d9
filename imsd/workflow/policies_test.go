package workflow

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

var policyApp = map[string][]byte{
	"app.toml": []byte("name = \"shop\"\n"),
	"components/db.toml": []byte(`type = "terraform"
drift_schedule = "@hourly"
[config]
dir = "db"
`),
	"components/web.toml": []byte(`type = "helm"
[config]
chart = "web"
`),
	"policies.toml": []byte(`[[policy]]
name = "tags"
engine = "rego"
applies_to = ["terraform"]
file = "policies/tags.rego"

[[policy]]
name = "inline"
engine = "rego"
contents = "package vendor.inline\nwarn contains \"hi\""
`),
	"policies/tags.rego": []byte("package vendor.tags\ndeny contains \"x\" if false\n"),
}

// A component's apply carries the vendor's policies for its type, signed
// with its config; what the install runs afterwards does not keep them,
// and a drift check carries none.
func TestVendorPoliciesTravelWithApplies(t *testing.T) {
	r := newRig(t, policyApp, store.InstallSettings{Parallelism: 4})
	configs := map[string]map[string]any{}
	wf := r.queue(Provision, 1, false)
	for range 20 {
		must(t, r.e.Advance(t.Context(), wf))
		jobs, _, err := r.st.ListJobs(t.Context(), store.JobFilter{InstallID: r.install.ID, Limit: 100})
		must(t, err)
		for _, j := range jobs {
			var cfg map[string]any
			must(t, json.Unmarshal(j.Config, &cfg))
			configs[j.Component] = cfg
		}
		if w, _, _ := r.st.GetWorkflow(t.Context(), wf); w.State.Terminal() {
			break
		}
		r.agentRound(wf)
	}
	names := func(cfg map[string]any) []string {
		var out []string
		list, _ := cfg[VendorPoliciesKey].([]any)
		for _, p := range list {
			m := p.(map[string]any)
			out = append(out, m["name"].(string)+"="+m["rego"].(string))
		}
		return out
	}
	db, web := names(configs["db"]), names(configs["web"])
	if len(db) != 2 || db[0] != "policies/tags.rego=package vendor.tags\ndeny contains \"x\" if false\n" || db[1] != "policies.toml:inline=package vendor.inline\nwarn contains \"hi\"" {
		t.Fatalf("db's vendor policies: %q", db)
	}
	if len(web) != 1 || web[0] != "policies.toml:inline=package vendor.inline\nwarn contains \"hi\"" {
		t.Fatalf("web's vendor policies: %q", web)
	}
	deployed, err := r.st.InstallComponents(t.Context(), r.install.ID)
	must(t, err)
	if len(deployed) != 2 {
		t.Fatalf("deployed %d components", len(deployed))
	}
	var ic store.InstallComponent
	for _, d := range deployed {
		var cfg map[string]any
		must(t, json.Unmarshal(d.Config, &cfg))
		if _, ok := cfg[VendorPoliciesKey]; ok {
			t.Fatalf("%s runs a config with the vendor's policies: %s", d.Name, d.Config)
		}
		if d.Name == "db" {
			ic = d
		}
	}

	app, err := r.e.App(t.Context(), "app_1", 1)
	must(t, err)
	in := r.installState()
	j, err := r.e.DriftJob(t.Context(), in, app, app.Components[0], ic, r.now())
	must(t, err)
	if j.Operation != OpDrift || j.Component != "db" || j.ComponentType != "terraform" || j.Mode != store.ModeMaintenance ||
		j.MaxAttempts != 1 || j.Timeout != 30*time.Minute {
		t.Fatalf("drift job %+v", j)
	}
	var cfg map[string]any
	must(t, json.Unmarshal(j.Config, &cfg))
	if cfg["dir"] != "db" || cfg[VendorPoliciesKey] != nil {
		t.Fatalf("drift job config %s", j.Config)
	}
}
