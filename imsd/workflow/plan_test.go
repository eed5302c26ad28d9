package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/load"
	"github.com/byoc-dev/byoc/schema/app/validate"
)

// diamond is an app of four action components: a, then b and c, then d.
// b reads the input "size"; d reads b's and c's outputs.
func diamond(extra map[string]string) map[string][]byte {
	files := map[string]string{
		"app.toml": "name = \"shop\"\n",
		"inputs.toml": `[[input]]
name = "size"
type = "number"
default = 1

[[input]]
name = "token"
sensitive = true
`,
		"components/a.toml": "type = \"action\"\n[config]\nsteps = [{ script = \"echo a\" }]\n",
		"components/b.toml": "type = \"action\"\ndependencies = [\"a\"]\n[config]\nsteps = [{ script = \"echo b {{ .inputs.size }}\" }]\n",
		"components/c.toml": "type = \"action\"\ndependencies = [\"a\"]\n[config]\nsteps = [{ script = \"echo c\" }]\n",
		"components/d.toml": "type = \"action\"\n[config]\nsteps = [{ script = \"echo {{ .components.b.outputs.x }} {{ .components.c.outputs.y }}\" }]\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	out := map[string][]byte{}
	for k, v := range files {
		if v != "" {
			out[k] = []byte(v)
		}
	}
	return out
}

func parse(t testing.TB, files map[string][]byte) *config.App {
	t.Helper()
	app, err := load.Parse(files, validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// deploy pretends every apply step of p ran with outputs x=1 and y=2.
func deploy(t *testing.T, p *Plan, have []store.InstallComponent, inst store.Install) []store.InstallComponent {
	t.Helper()
	byName := map[string]store.InstallComponent{}
	for _, d := range have {
		byName[d.Name] = d
	}
	var inputs map[string]any
	json.Unmarshal(p.Inputs, &inputs)
	for _, s := range p.Steps {
		if s.Component == "" {
			continue
		}
		if s.Operation == OpDestroy {
			delete(byName, s.Component)
			continue
		}
		var cfg map[string]any
		json.Unmarshal(s.Config, &cfg)
		r := &Renderer{InstallID: inst.ID, InstallName: inst.Name, Inputs: inputs, Outputs: map[string]map[string]string{}}
		for n, d := range byName {
			r.Outputs[n] = d.Outputs
		}
		rendered, err := r.Config(s.ComponentType, cfg)
		if err != nil {
			t.Fatalf("render %s: %v", s.Name, err)
		}
		canon, digest := Canonical(rendered)
		var needs []string
		for _, n := range s.Needs {
			if n == "a" || n == "b" || n == "c" || n == "d" {
				needs = append(needs, n)
			}
		}
		byName[s.Component] = store.InstallComponent{Name: s.Component, ComponentType: s.ComponentType, Digest: digest, Config: canon,
			Outputs: map[string]string{"x": "1", "y": "2"}, Needs: needs}
	}
	var out []store.InstallComponent
	for _, d := range byName {
		out = append(out, d)
	}
	return out
}

func stepNames(p *Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.Name)
	}
	return out
}

func TestPlanDiamond(t *testing.T) {
	inst := store.Install{ID: "ins_1", Name: "acme"}
	app := parse(t, diamond(nil))
	p, err := Make(Provision, Target{App: app, Revision: 1, Install: inst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(stepNames(p), " "); got != "a b c d" {
		t.Fatalf("provision steps %q, want a b c d", got)
	}
	needs := map[string][]string{}
	for _, s := range p.Steps {
		needs[s.Name] = s.Needs
		if s.Reason != "new" {
			t.Errorf("%s: reason %q, want new", s.Name, s.Reason)
		}
	}
	if fmt.Sprint(needs) != "map[a:[] b:[a] c:[a] d:[b c]]" {
		t.Errorf("needs %v", needs)
	}
	deployed := deploy(t, p, nil, inst)

	// Nothing changed: nothing to do.
	p, err = Make(Update, Target{App: app, Revision: 1, Install: inst}, deployed)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Steps) != 0 || len(p.Unchanged) != 4 {
		t.Fatalf("unchanged update: steps %v unchanged %v", stepNames(p), p.Unchanged)
	}

	// A changed input redeploys b (which reads it) and d (downstream), not a or c.
	p, err = Make(Update, Target{App: app, Revision: 1, Install: inst, Inputs: map[string]string{"size": "3"}}, deployed)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(stepNames(p), " "); got != "b d" {
		t.Fatalf("input change steps %q, want b d", got)
	}
	if p.Steps[0].Reason != "changed: config.steps" || p.Steps[1].Reason != "downstream of b" {
		t.Errorf("reasons %q, %q", p.Steps[0].Reason, p.Steps[1].Reason)
	}
	if !slices.Equal(p.Steps[1].Needs, []string{"b"}) {
		t.Errorf("d needs %v, want only b (c is unchanged)", p.Steps[1].Needs)
	}

	// Removing d destroys it; the bad input is named.
	app2 := parse(t, diamond(map[string]string{"components/d.toml": ""}))
	p, err = Make(Update, Target{App: app2, Revision: 2, Install: inst}, deployed)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Steps) != 1 || p.Steps[0].Operation != OpDestroy || p.Steps[0].Reason != "no longer in revision 2" {
		t.Fatalf("removal plan %+v", p.Steps)
	}
	_, err = Make(Update, Target{App: app, Revision: 1, Install: inst, Inputs: map[string]string{"size": "big", "colour": "x"}}, deployed)
	if err == nil || !strings.Contains(err.Error(), `inputs.colour: no input named "colour"`) || !strings.Contains(err.Error(), `input "size" is a number, not "big"`) {
		t.Fatalf("bad inputs: %v", err)
	}
}

func TestPlanDeprovisionReverseOrderAndHooks(t *testing.T) {
	inst := store.Install{ID: "ins_1", Name: "acme"}
	app := parse(t, diamond(map[string]string{
		"actions/backup.toml": "[[trigger]]\ntype = \"pre_deprovision\"\n[[step]]\nname = \"dump\"\nscript = \"echo dump\"\n",
		"actions/warm.toml":   "[[trigger]]\ntype = \"post_deploy\"\ncomponent = \"b\"\n[[step]]\nname = \"warm\"\nscript = \"echo warm\"\n",
	}))
	p, err := Make(Provision, Target{App: app, Revision: 1, Install: inst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]store.Step{}
	for _, s := range p.Steps {
		byName[s.Name] = s
	}
	if w, ok := byName["post_deploy:warm:b"]; !ok || !slices.Equal(w.Needs, []string{"b"}) || !slices.Contains(byName["d"].Needs, "post_deploy:warm:b") {
		t.Fatalf("post_deploy hook of b: %+v; d needs %v", w, byName["d"].Needs)
	}
	deployed := deploy(t, p, nil, inst)
	p, err = Make(Deprovision, Target{App: app, Revision: 1, Install: inst}, deployed)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(stepNames(p), " "); got != "pre_deprovision:backup d c b a" {
		t.Fatalf("deprovision steps %q", got)
	}
	for _, s := range p.Steps[1:] {
		if s.Operation != OpDestroy || !slices.Contains(s.Needs, "pre_deprovision:backup") {
			t.Errorf("%s: op %s needs %v", s.Name, s.Operation, s.Needs)
		}
	}
	if byName := p.Steps[4]; !slices.Equal(byName.Needs, []string{"b", "c", "pre_deprovision:backup"}) {
		t.Errorf("a is destroyed after b and c: needs %v", byName.Needs)
	}
}

// BenchmarkPlan200x1000 validates an app of 200 components and plans it for
// 1,000 installs whose deployed state differs, the way a push to a large
// fleet does.
func BenchmarkPlan200x1000(b *testing.B) {
	files := map[string][]byte{
		"app.toml":    []byte("name = \"big\"\n"),
		"inputs.toml": []byte("[[input]]\nname = \"region\"\ndefault = \"eu\"\n[[input]]\nname = \"size\"\ntype = \"number\"\ndefault = 1\n"),
	}
	for i := range 200 {
		var deps []string
		// Each component needs up to three earlier ones: a wide DAG.
		for _, d := range []int{i - 1, i / 2, i / 3} {
			if d >= 0 && d < i && !slices.Contains(deps, fmt.Sprintf("\"c%03d\"", d)) {
				deps = append(deps, fmt.Sprintf("\"c%03d\"", d))
			}
		}
		cfg := fmt.Sprintf("type = \"action\"\ndependencies = [%s]\n[config]\nsteps = [{ script = \"deploy c%03d {{ .inputs.region }}\" }]\n", strings.Join(deps, ", "), i)
		if i%10 == 0 {
			cfg += "[config.sandbox]\nmemory_mb = 64\n"
		}
		if i%20 == 5 {
			cfg = strings.Replace(cfg, "{{ .inputs.region }}", "{{ .inputs.region }} {{ .inputs.size }}", 1)
		}
		files[fmt.Sprintf("components/c%03d.toml", i)] = []byte(cfg)
	}
	const installs = 1000
	var parse, plan time.Duration
	var steps int
	for b.Loop() {
		t0 := time.Now()
		app, err := load.Parse(files, validate.Options{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		parse += t1.Sub(t0)
		first, err := Make(Provision, Target{App: app, Revision: 1, Install: store.Install{ID: "ins_0", Name: "i0"}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		base := deployAll(first)
		t2 := time.Now()
		steps = 0
		for n := range installs {
			// Every fifth install runs a bigger size: a fifth of the
			// fleet redeploys the components that read it.
			in := store.Install{ID: "ins_0", Name: "i0", Inputs: map[string]string{"size": fmt.Sprint(1 + n%5/4)}}
			p, err := Make(Update, Target{App: app, Revision: 2, Install: in}, base)
			if err != nil {
				b.Fatal(err)
			}
			steps += len(p.Steps)
		}
		plan += time.Since(t2)
	}
	b.ReportMetric(float64(parse.Microseconds())/float64(b.N)/1000, "ms-validate")
	b.ReportMetric(float64(plan.Milliseconds())/float64(b.N), "ms-plan-1000-installs")
	b.ReportMetric(float64(steps), "steps-planned")
	fmt.Printf("validate 200 components: %.1f ms; plan 1,000 installs: %.0f ms (%.2f ms per install); %d steps planned\n",
		float64(parse.Microseconds())/float64(b.N)/1000, float64(plan.Milliseconds())/float64(b.N),
		float64(plan.Microseconds())/float64(b.N)/installs/1000, steps)
}

// deployAll is what an install runs after a successful provision of p
// (no outputs), computed without a testing.T.
func deployAll(p *Plan) []store.InstallComponent {
	var inputs map[string]any
	json.Unmarshal(p.Inputs, &inputs)
	var out []store.InstallComponent
	for _, s := range p.Steps {
		var cfg map[string]any
		json.Unmarshal(s.Config, &cfg)
		r := &Renderer{InstallID: "ins_0", InstallName: "i0", Inputs: inputs}
		rendered, _ := r.Config(s.ComponentType, cfg)
		canon, digest := Canonical(rendered)
		out = append(out, store.InstallComponent{Name: s.Component, ComponentType: s.ComponentType, Digest: digest, Config: canon})
	}
	return out
}
