package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/plugins/policy/examples"
)

// buildPlugin builds a plugin binary byoc-plugin-NAME from dir (a module
// of its own when mod is true, else a package of this module) into a
// fresh plugin dir, registers its type with imsd from what its describe
// prints, and returns the agent flags that run it.
func buildPlugin(t *testing.T, cli *cluster.CLI, name, dir string, ownModule bool) []string {
	t.Helper()
	plugins := t.TempDir()
	bin := filepath.Join(plugins, "byoc-plugin-"+name)
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	if !ownModule {
		build = exec.Command("go", "build", "-o", bin, "./"+dir)
		build.Dir = cluster.RepoRoot()
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build plugin %s: %v\n%s", name, err, out)
	}
	describe, err := exec.Command(bin, "describe").Output()
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	desc := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(desc, describe, 0o600); err != nil {
		t.Fatal(err)
	}
	cli.Run(0, "plugin", "register", desc)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return []string{"--plugin-dir", plugins, "--plugin-pin", name + "=" + hex.EncodeToString(sum[:])}
}

// The policy gate end to end: a customer policy in the agent's
// --policy-dir and the vendor's from the app config reach a real plugin
// process through imsd and a real agent; a warn is shown, a deny blocks
// the apply, an app config cannot switch the customer's policy off, and
// byoc job get and the audit log show what the policies said.
func TestPolicyGateEndToEnd(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	agentFlags := buildPlugin(t, cli, "gated", "e2e/testdata/gatedplugin", false)

	policyDir := t.TempDir()
	maint := filepath.Join(policyDir, "maintenance.rego")
	if err := os.WriteFile(maint, []byte(examples.Maintenance), 0o600); err != nil {
		t.Fatal(err)
	}
	app := map[string]string{
		"app.toml":           "name = \"store\"\n",
		"installs/acme.toml": "",
		"inputs.toml":        "[[input]]\nname = \"action\"\ndefault = \"create\"\n",
		"components/bucket.toml": `type = "gated"
[config]
changes = [{ address = "aws_s3_bucket.logs", action = "{{ .inputs.action }}" }]
`,
		"policies.toml": `[[policy]]
name = "count"
engine = "rego"
file = "policies/count.rego"

[[policy]]
name = "override"
description = "tries to switch the customer's maintenance policy off"
engine = "rego"
applies_to = ["gated"]
contents = "package byoc.examples.maintenance\ndeny := set()\n"
`,
		"policies/count.rego": "package vendor.count\n\nwarn contains msg if {\n\tmsg := sprintf(\"%d changes in %s mode\", [count(input.changes), input.mode])\n}\n",
	}
	token := cli.PushApp(app).EnrollToken(t)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), append(agentFlags, "--policy-dir", policyDir)...)

	// Provision: the maintenance policy lets a create through; the
	// vendor's warning is shown.
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("provision:\n%s", out)
	}
	jobs := cli.Run(0, "job", "list", "--install", "acme", "-o", "json")
	id := jobIDOf(t, jobs, "apply")
	out := cli.Run(0, "job", "get", id)
	for _, want := range []string{"Policy: 0 denied, 1 warning\n", "warn [vendor] policies/count.rego: 1 changes in provision mode"} {
		if !strings.Contains(out, want) {
			t.Errorf("job get lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(strings.Join(logTexts(t, ims, id), "\n"), "[agentd] policies: customer "+maint+", vendor policies/count.rego, vendor policies.toml:override") {
		t.Errorf("the job log does not name the policies:\n%s", strings.Join(logTexts(t, ims, id), "\n"))
	}

	// An update (maintenance mode) that deletes is denied by the
	// customer's policy, whatever the vendor's override says.
	out, _, code := cli.Exec("install", "update", "acme", "--input", "action=delete", "--wait")
	if code == 0 {
		t.Fatalf("the denied update succeeded:\n%s", out)
	}
	jobs = cli.Run(0, "job", "list", "--install", "acme", "-o", "json")
	id = jobIDOf(t, jobs, "apply")
	out = cli.Run(0, "job", "get", id)
	for _, want := range []string{
		"State:", "failed",
		"denied by policy: maintenance mode: aws_s3_bucket.logs would be deleted (delete)",
		"Policy: 1 denied, 1 warning\n",
		"deny [customer] " + maint + ": maintenance mode: aws_s3_bucket.logs would be deleted",
		"warn [vendor] policies/count.rego: 1 changes in maintenance mode",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("job get lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(strings.Join(logTexts(t, ims, id), "\n"), "applied") {
		t.Error("the plugin applied a denied change")
	}
	audit := cli.Run(0, "audit", "list", "--install", "acme")
	if !lineWith(audit, "job.finished", "job:"+id, "1 deny, 1 warn", "maintenance mode: aws_s3_bucket.logs would be deleted") {
		t.Errorf("the audit log lacks the denial:\n%s", audit)
	}
}

// jobIDOf returns the id of the newest job of operation op in a job list's
// JSON.
func jobIDOf(t *testing.T, listJSON, op string) string {
	t.Helper()
	var jobs []struct {
		ID        string `json:"id"`
		Operation string `json:"operation"`
	}
	if err := json.Unmarshal([]byte(listJSON), &jobs); err != nil {
		t.Fatalf("job list: %v\n%s", err, listJSON)
	}
	best := ""
	for _, j := range jobs {
		if j.Operation == op && j.ID > best { // ids sort by creation time
			best = j.ID
		}
	}
	if best == "" {
		t.Fatalf("no %s job in:\n%s", op, listJSON)
	}
	return best
}

func logTexts(t *testing.T, ims *cluster.IMS, id string) []string {
	t.Helper()
	var out []string
	for _, l := range cluster.Logs(t, ims.Admin(), id) {
		out = append(out, l.Text)
	}
	return out
}

// Drift end to end: a component with a drift_schedule is checked by its
// real plugin on a real agent once deployed; a change made outside byoc
// shows as drifted, with what differs, in byoc install drift (table and
// JSON) and byoc install get.
func TestDriftEndToEnd(t *testing.T) {
	skipShort(t)
	// The scheduler's clock runs ahead of the real one by offset, which
	// the test moves a minute on to bring the next tick due at once.
	var offset atomic.Int64
	offset.Store(int64(time.Minute))
	opts := fast
	opts.CronInterval = 200 * time.Millisecond
	opts.CronNow = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	target := filepath.Join(t.TempDir(), "motd")
	// The plugin writes a file outside the agent: the customer lets it.
	agentFlags := append(buildPlugin(t, cli, "localfile", filepath.Join(cluster.RepoRoot(), "plugins", "examples", "localfile"), true),
		"--sandbox-writable", filepath.Dir(target))
	token := cli.PushApp(map[string]string{
		"app.toml":           "name = \"notes\"\n",
		"installs/acme.toml": "",
		"components/motd.toml": `type = "localfile"
drift_schedule = "* * * * *"
[config]
path = "` + target + `"
content = "hello\n"
mode = "0644"
`,
	}).EnrollToken(t)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), agentFlags...)

	// Before a deploy there is nothing to check.
	if out, errOut, code := cli.Exec("install", "drift", "acme"); code != 0 || out != "" || !strings.Contains(errOut, "Nothing to show for acme") {
		t.Fatalf("install drift before a deploy: %d\n%s%s", code, out, errOut)
	}
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("provision:\n%s", out)
	}
	type drift struct {
		Components []struct {
			Component string `json:"component"`
			Status    string `json:"status"`
			JobID     string `json:"jobId"`
			Changes   []struct {
				Address string `json:"address"`
				Action  string `json:"action"`
			} `json:"changes"`
		} `json:"components"`
	}
	read := func() drift {
		var d drift
		out := cli.Run(0, "install", "drift", "acme", "-o", "json")
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("install drift -o json: %v\n%s", err, out)
		}
		return d
	}
	var d drift
	cluster.Eventually(t, 30*time.Second, "the first drift check to report in sync", func() bool {
		d = read()
		return len(d.Components) == 1 && d.Components[0].Status == "in_sync"
	})
	first := d.Components[0].JobID

	// Someone edits the file outside byoc; the next tick's check sees it.
	if err := os.WriteFile(target, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	offset.Add(int64(time.Minute))
	cluster.Eventually(t, 30*time.Second, "a drift check to report drifted", func() bool {
		d = read()
		return len(d.Components) == 1 && d.Components[0].Status == "drifted"
	})
	c := d.Components[0]
	if c.JobID == first || len(c.Changes) == 0 || c.Changes[0].Address != target {
		t.Fatalf("drift: %+v", c)
	}
	out := cli.Run(0, "install", "drift", "acme")
	if !lineWith(out, "motd", "drifted", "1", "* * * * *", c.JobID) || !strings.Contains(out, "motd differs from what was applied:") || !strings.Contains(out, target) {
		t.Errorf("install drift:\n%s", out)
	}
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Drift:", "motd drifted", "byoc install drift acme") {
		t.Errorf("install get:\n%s", out)
	}
	if out := cli.Run(0, "job", "get", c.JobID); !strings.Contains(out, "Operation:") || !strings.Contains(out, "drift") {
		t.Errorf("job get of the check:\n%s", out)
	}
}

// Drift on demand: byoc install drift --run checks the install's
// components now, without a drift_schedule, waits, and lists the result
// (issue 29 item 6: drift ran only on its schedule).
func TestDriftOnDemand(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	target := filepath.Join(t.TempDir(), "motd")
	agentFlags := append(buildPlugin(t, cli, "localfile", filepath.Join(cluster.RepoRoot(), "plugins", "examples", "localfile"), true),
		"--sandbox-writable", filepath.Dir(target))
	token := cli.PushApp(map[string]string{
		"app.toml":           "name = \"notes\"\n",
		"installs/acme.toml": "",
		"components/motd.toml": `type = "localfile"
[config]
path = "` + target + `"
content = "hello\n"
mode = "0644"
`,
	}).EnrollToken(t)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), agentFlags...)
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("provision:\n%s", out)
	}
	if out := cli.Run(0, "install", "drift", "acme", "--run"); !lineWith(out, "motd", "in_sync") {
		t.Fatalf("drift --run of an unchanged file:\n%s", out)
	}
	if err := os.WriteFile(target, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := cli.Run(0, "install", "drift", "acme", "motd", "--run")
	if !lineWith(out, "motd", "drifted", "1") || !strings.Contains(out, "motd differs from what was applied:") {
		t.Fatalf("drift --run after an edit:\n%s", out)
	}
	if _, errOut, code := cli.Exec("install", "drift", "acme", "nope", "--run"); code == 0 || !strings.Contains(errOut, `runs no component "nope" (it runs: motd)`) {
		t.Fatalf("drift --run of an unknown component: %d %s", code, errOut)
	}
}
