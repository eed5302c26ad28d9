package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// Labels as an operator uses them, with the real binaries: declared in
// installs/*.toml, set with byoc install label (kubectl's semantics),
// shown in lists and selected with -l by imsd, on both databases.
func TestLabelsAndSelectors(t *testing.T) { runLabels(t, fast) }

func TestLabelsAndSelectorsOnPostgres(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.DatabaseURL = pgtest.Start(t)
	runLabels(t, opts)
}

func runLabels(t *testing.T, opts cluster.Options) {
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	files := map[string]string{
		"app.toml":            "name = \"shop\"\n",
		"components/a.toml":   "type = \"action\"\n[config]\nsteps = [{ script = \"true\" }]\n",
		"installs/acme.toml":  "[labels]\ntier = \"canary\"\nregion = \"eu\"\n",
		"installs/beta.toml":  "[labels]\ntier = \"prod\"\nregion = \"us\"\n",
		"installs/gamma.toml": "[labels]\ntier = \"prod\"\nregion = \"eu\"\n\"example.com/legacy\" = \"\"\n",
	}
	p := cli.PushApp(files)

	names := func(args ...string) string {
		t.Helper()
		out := cli.Run(0, append([]string{"install", "list", "-o", "name"}, args...)...)
		return strings.ReplaceAll(strings.Join(strings.Fields(out), ","), "install/", "")
	}
	for sel, want := range map[string]string{
		"tier=canary":                        "acme",
		"tier!=canary":                       "beta,gamma",
		"region in (eu),!example.com/legacy": "acme",
		"example.com/legacy":                 "gamma",
		"tier notin (canary,prod)":           "",
		"":                                   "acme,beta,gamma",
	} {
		if got := names("-l", sel); got != want {
			t.Errorf("install list -l %q = %q, want %q", sel, got, want)
		}
	}
	// A bad selector is the operator's mistake: exit 1 naming the flag and the key.
	_, e, code := cli.Exec("install", "list", "-l", "Tier!!=x")
	if code == 0 || !strings.Contains(e, "--selector") {
		t.Fatalf("bad selector: exit %d, stderr %q", code, e)
	}
	_, e, code = cli.Exec("install", "list", "-l", "-bad=x")
	if code == 0 || !strings.Contains(e, `label key "-bad"`) {
		t.Fatalf("bad key: exit %d, stderr %q", code, e)
	}

	// audit list -l: the chains of the installs the selector picks (each
	// install's chain starts with its creation), named in the CHAIN
	// column; no vendor chain.
	chains := func(args ...string) map[string]bool {
		t.Helper()
		out := cli.Run(0, append([]string{"audit", "list"}, args...)...)
		seen := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 1 {
				seen[f[1]] = true
			}
		}
		return seen
	}
	if got := chains("-l", "region=eu"); len(got) != 2 || !got["acme"] || !got["gamma"] {
		t.Errorf("audit list -l region=eu chains = %v, want acme and gamma", got)
	}
	if got := chains(); !got["vendor"] || !got["beta"] {
		t.Errorf("audit list chains = %v, want every chain", got)
	}
	if _, e, code := cli.Exec("audit", "list", "-l", "tier=x", "--vendor"); code != 2 || !strings.Contains(e, "without --install or --vendor") {
		t.Errorf("audit list -l with --vendor: exit %d, stderr %q", code, e)
	}

	// byoc install label: kubectl's semantics.
	out := cli.Run(0, "install", "label", "acme", "team=payments", "region-")
	if !strings.Contains(out, "install/acme labeled: team=payments,tier=canary") {
		t.Fatalf("install label:\n%s", out)
	}
	_, e, code = cli.Exec("install", "label", "acme", "tier=prod")
	if code == 0 || !strings.Contains(e, `label "tier" already has a value ("canary")`) || !strings.Contains(e, "--overwrite") {
		t.Fatalf("changing a value without --overwrite: exit %d, stderr %q", code, e)
	}
	cli.Run(0, "install", "label", "acme", "tier=prod", "--overwrite")
	if got := names("-l", "tier=prod"); got != "acme,beta,gamma" {
		t.Fatalf("after --overwrite, tier=prod = %q", got)
	}
	_, e, code = cli.Exec("install", "label", "acme", "Bad Key=x")
	if code != 2 || !strings.Contains(e, `label key "Bad Key"`) {
		t.Fatalf("bad key: exit %d, stderr %q", code, e)
	}

	// Shown in the table (--show-labels) and in -o json.
	out = cli.Run(0, "install", "list", "--show-labels", "-l", "team")
	if !strings.Contains(out, "LABELS") || !strings.Contains(out, "team=payments,tier=prod") {
		t.Fatalf("install list --show-labels:\n%s", out)
	}
	var listed []struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(cli.Run(0, "install", "list", "-o", "json", "-l", "region=us")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Name != "beta" || listed[0].Labels["tier"] != "prod" {
		t.Fatalf("install list -o json -l region=us = %+v", listed)
	}
	if out := cli.Run(0, "install", "get", "gamma"); !strings.Contains(out, "example.com/legacy=,region=eu,tier=prod") {
		t.Fatalf("install get:\n%s", out)
	}

	// A push that changes a file's labels says so, and keeps labels set
	// with byoc install label that the file does not name.
	cluster.WriteApp(t, p.Dir, map[string]string{"installs/acme.toml": "[labels]\ntier = \"canary\"\n"})
	out = cli.Run(0, "app", "push", p.Dir)
	want := "~ install acme changed from installs/acme.toml:\n    labels.tier: \"prod\" → \"canary\"\n"
	if !strings.Contains(out, want) {
		t.Fatalf("push with acme's labels changed:\n%s\nwant:\n%s", out, want)
	}
	if got := names("-l", "team=payments,tier=canary"); got != "acme" {
		t.Fatalf("after the push, team=payments,tier=canary = %q", got)
	}
	// A bad label in a file names file, line and key.
	cluster.WriteApp(t, p.Dir, map[string]string{"installs/beta.toml": "[labels]\ntier = \"prod\"\n\"bad key\" = \"x\"\n"})
	_, e, code = cli.Exec("app", "push", p.Dir)
	if code == 0 || !strings.Contains(e, "installs/beta.toml:3") || !strings.Contains(e, `label key "bad key"`) {
		t.Fatalf("push with a bad label: exit %d, stderr %q", code, e)
	}

	// The lists of things that belong to installs take -l too.
	cli.Run(0, "install", "provision", "acme")
	cli.Run(0, "install", "provision", "beta")
	wf := cli.Run(0, "workflow", "list", "-l", "tier=canary", "-o", "json")
	var wfs []struct {
		InstallName string `json:"installName"`
	}
	if err := json.Unmarshal([]byte(wf), &wfs); err != nil {
		t.Fatalf("workflow list -o json: %v\n%s", err, wf)
	}
	for _, w := range wfs {
		if w.InstallName != "acme" {
			t.Fatalf("workflow list -l tier=canary lists %s's workflow", w.InstallName)
		}
	}
	if len(wfs) == 0 {
		t.Fatalf("workflow list -l tier=canary lists nothing:\n%s", wf)
	}
	plan := cli.Run(0, "install", "plan", "-l", "region=us")
	if !strings.Contains(plan, "beta") || strings.Contains(plan, "acme") || strings.Contains(plan, "gamma") {
		t.Fatalf("install plan -l region=us:\n%s", plan)
	}
	jobs := cli.Run(0, "job", "list", "-l", "tier=nobody", "-o", "json")
	if strings.TrimSpace(jobs) != "[]" {
		t.Fatalf("job list -l tier=nobody = %s", jobs)
	}
}

// byoc app diff --installs / -l: per install, each component's config as
// the install gets it (its installs/NAME.toml override merged over the
// app's) and each input's value, old → new, a sensitive one masked.
func TestAppDiffPerInstall(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	files := map[string]string{
		"app.toml":          "name = \"shop\"\n",
		"inputs.toml":       "[[input]]\nname = \"size\"\ntype = \"number\"\ndefault = 1\n\n[[input]]\nname = \"token\"\nsensitive = true\n",
		"components/a.toml": "type = \"action\"\n[config]\nsteps = [{ script = \"echo a\" }]\n",
		"components/b.toml": "type = \"action\"\n[config]\nsteps = [{ script = \"echo b\" }]\n",
		"installs/acme.toml": "[labels]\ntier = \"canary\"\n[inputs]\ntoken = \"s-1111\"\n" +
			"[components.a.config]\nsteps = [{ script = \"echo acme\" }]\n",
		"installs/beta.toml": "[labels]\ntier = \"prod\"\n[inputs]\nsize = 3\n",
	}
	p := cli.PushApp(files)
	cluster.WriteApp(t, p.Dir, map[string]string{
		"components/a.toml":  "type = \"action\"\n[config]\nsteps = [{ script = \"echo a2\" }]\n",
		"components/b.toml":  "type = \"action\"\n[config]\nsteps = [{ script = \"echo b2\" }]\n",
		"installs/acme.toml": strings.Replace(files["installs/acme.toml"], "s-1111", "s-2222", 1),
	})
	cli.Run(0, "app", "push", p.Dir)

	out := cli.Run(0, "app", "diff", "shop", "1", "-l", "tier=canary")
	for _, want := range []string{
		"Per install: 1 changed, 0 unchanged.\ninstall acme:\n",
		"  ~ component b: steps\n      steps: [{\"script\":\"echo b\"}] → [{\"script\":\"echo b2\"}]\n",
		"  ~ input token: value\n      value: (sensitive) → (sensitive)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("app diff -l tier=canary lacks %q:\n%s", want, out)
		}
	}
	// acme overrides a's steps: a's change does not reach it.
	_, per, _ := strings.Cut(out, "Per install:")
	if strings.Contains(per, "component a:") || strings.Contains(out, "s-1111") || strings.Contains(out, "s-2222") || strings.Contains(out, "install beta") {
		t.Errorf("app diff -l tier=canary:\n%s", out)
	}
	out = cli.Run(0, "app", "diff", "shop", "1", "--installs")
	if !strings.Contains(out, "Per install: 2 changed, 0 unchanged.") ||
		!strings.Contains(out, "install beta:\n  ~ component a: steps\n      steps: [{\"script\":\"echo a\"}] → [{\"script\":\"echo a2\"}]\n") {
		t.Errorf("app diff --installs:\n%s", out)
	}
}
