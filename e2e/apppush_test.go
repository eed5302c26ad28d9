package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// An app config pushed with the real byoc binary to a real imsd becomes
// numbered, immutable revisions; an identical push creates nothing; a bad
// config is refused with every problem listed; diff names what changed.
func TestAppPushRevisionsAndDiff(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	run := cli.Run
	dir := filepath.Join(t.TempDir(), "acme")
	run(0, "app", "init", dir)

	if out := run(0, "app", "push", dir); !strings.Contains(out, `Pushed app "acme-analytics" revision 1`) {
		t.Fatalf("first push:\n%s", out)
	}
	if out := run(0, "app", "push", dir); !strings.Contains(out, "unchanged: revision 1") {
		t.Fatalf("identical push:\n%s", out)
	}

	edit := func(p, from, to string) {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !strings.Contains(string(b), from) {
			t.Fatalf("%s: %v (looking for %q)", p, err, from)
		}
		os.WriteFile(filepath.Join(dir, p), []byte(strings.Replace(string(b), from, to, 1)), 0o644)
	}
	edit("components/api.toml", `chart = "charts/api@sha256:`, `chart = "charts/api2@sha256:`)
	out := run(0, "app", "push", dir)
	if !strings.Contains(out, "revision 2") || !strings.Contains(out, "~ component api: config.chart") {
		t.Fatalf("second push:\n%s", out)
	}

	// A broken config never reaches a revision.
	edit("components/web.toml", `dependencies = ["api"]`, `dependencies = ["apii"]`)
	out = run(1, "app", "push", dir)
	if !strings.Contains(out, `components/web.toml:3: dependencies[0]: no component named "apii" (did you mean "api"?)`) {
		t.Fatalf("bad push:\n%s", out)
	}
	edit("components/web.toml", `dependencies = ["apii"]`, `dependencies = ["api"]`)

	out = run(0, "app", "revisions", "acme-analytics", "-o", "json")
	var revs []struct {
		Number  string
		Version string
	}
	if err := json.Unmarshal([]byte(out), &revs); err != nil || len(revs) != 2 || revs[0].Number != "2" || revs[1].Number != "1" || revs[0].Version != "0.1.0" {
		t.Fatalf("revisions: %v\n%s", err, out)
	}
	// Each changed key with its old and new values; --detailed-exitcode exits 2 on changes.
	if out := run(2, "app", "diff", "acme-analytics", "1", "2", "--detailed-exitcode"); !strings.HasPrefix(strings.TrimSpace(out), "~ component api: config.chart\n      config.chart: \"charts/api@sha256:") ||
		!strings.Contains(out, `→ "charts/api2@sha256:`) || strings.Count(out, "\n") != 2 {
		t.Fatalf("diff 1 2:\n%s", out)
	}
	if out := run(0, "app", "diff", "acme-analytics", "2"); strings.TrimSpace(out) != "No changes." {
		t.Fatalf("diff 2 latest:\n%s", out)
	}
	if out := run(1, "app", "diff", "acme-analytics", "1", "7"); !strings.Contains(out, `app "acme-analytics" has no revision 7 (byoc app revisions acme-analytics lists them`) {
		t.Fatalf("diff against a missing revision:\n%s", out)
	}
}

// app push re-applies installs/*.toml as kubectl apply does: the file wins
// for what it names, says what it changed, changes nothing (and says
// nothing) when nothing differs, keeps what byoc install update set that
// the file does not name, and unsets what the file stopped naming.
func TestAppPushInstallFilesChangeOnlyWhatChanged(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	files := map[string]string{
		"app.toml": "name = \"files\"\n",
		"inputs.toml": `[[input]]
name = "size"
type = "number"
default = 1

[[input]]
name = "region"
default = "eu"

[[input]]
name = "tier"
default = "basic"

[[input]]
name = "token"
sensitive = true
`,
		"components/a.toml":  "type = \"action\"\n[config]\nsteps = [{ script = \"echo {{ .inputs.size }}\" }]\n",
		"installs/beta.toml": "parallelism = 2\n[inputs]\nsize = 3\ntier = \"gold\"\ntoken = \"tok-1111\"\n",
	}
	p := cli.PushApp(files)
	if !strings.Contains(p.Output, "+ install beta created from installs/beta.toml") {
		t.Fatalf("first push:\n%s", p.Output)
	}
	cli.Run(0, "install", "update", "beta", "--no-deploy", "--input", "region=us", "--require-approval", "true")
	inputs := func() map[string]string {
		t.Helper()
		r, err := ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "beta"}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Install.Inputs
	}

	// The same files again, and then a change elsewhere: beta is left as it is.
	for i, push := range []map[string]string{files, withFile(files, "components/a.toml", "type = \"action\"\n[config]\nsteps = [{ script = \"echo v2 {{ .inputs.size }}\" }]\n")} {
		cluster.WriteApp(t, p.Dir, push)
		out := cli.Run(0, "app", "push", p.Dir)
		if strings.Contains(out, "install beta") {
			t.Fatalf("push %d with beta's file unchanged says:\n%s", i+2, out)
		}
		if in := inputs(); in["region"] != "us" || in["size"] != "3" || in["tier"] != "gold" {
			t.Fatalf("push %d: inputs %v, want region=us (byoc install update) kept beside the file's", i+2, in)
		}
	}

	// The file changes size, stops naming tier and changes the token: the
	// push says exactly that, keeps region, and shows no sensitive value.
	cluster.WriteApp(t, p.Dir, map[string]string{"installs/beta.toml": "parallelism = 2\n[inputs]\nsize = 5\ntoken = \"tok-2222\"\n"})
	out := cli.Run(0, "app", "push", p.Dir)
	want := "~ install beta changed from installs/beta.toml:\n    inputs.size: \"3\" → \"5\"\n    inputs.tier: \"gold\" → unset\n    inputs.token: changed\n"
	if !strings.Contains(out, want) || strings.Contains(out, "tok-") {
		t.Fatalf("push with beta's file changed:\n%s\nwant:\n%s", out, want)
	}
	if in := inputs(); in["region"] != "us" || in["size"] != "5" || in["tier"] != "" {
		t.Fatalf("inputs %v, want region=us kept, size=5, tier unset", in)
	}
	// The file wins for what it names, over byoc install update.
	cli.Run(0, "install", "update", "beta", "--no-deploy", "--input", "size=9", "--parallelism", "4")
	cluster.WriteApp(t, p.Dir, map[string]string{"installs/beta.toml": "parallelism = 2\n[inputs]\nsize = 5\ntoken = \"tok-2222\"\n# again\n"})
	out = cli.Run(0, "app", "push", p.Dir)
	want = "~ install beta changed from installs/beta.toml:\n    inputs.size: \"9\" → \"5\"\n    parallelism: 4 → 2\n"
	if !strings.Contains(out, want) {
		t.Fatalf("push over byoc install update:\n%s\nwant:\n%s", out, want)
	}
}

// withFile returns a copy of files with path set to body.
func withFile(files map[string]string, path, body string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		out[k] = v
	}
	out[path] = body
	return out
}
