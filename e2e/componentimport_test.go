package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// byoc component import adopts a file written by hand as a kvfile
// component (issue 29: import of existing resources): a real imsd, agent
// and the kvfile example plugin. The import changes nothing, imsd then
// counts the component as deployed (a plan leaves it unchanged, a drift
// check finds it in sync), and a second import is refused.
func TestComponentImport(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	dir := t.TempDir()
	target := filepath.Join(dir, "app.env")
	const content = "MODE=prod\nPORT=8080\n"
	if err := os.WriteFile(target, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := append(buildPlugin(t, cli, "kvfile", filepath.Join(cluster.RepoRoot(), "plugins", "examples", "kvfile"), true), "--sandbox-writable", dir)
	token := cli.PushApp(map[string]string{
		"app.toml":           "name = \"envs\"\n",
		"installs/acme.toml": "",
		"components/env.toml": `type = "kvfile"
[config]
path = "` + target + `"
entries = { PORT = "8080", MODE = "prod" }
`,
	}).EnrollToken(t)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), flags...)

	out := cli.Run(0, "component", "import", "acme", "env", target)
	if !strings.Contains(out, "succeeded") || !strings.Contains(out, "imported "+target+": 2 keys, 0 differ") || !strings.Contains(out, "path = "+target) {
		t.Fatalf("import:\n%s", out)
	}
	if b, _ := os.ReadFile(target); string(b) != content {
		t.Fatalf("the import changed the file: %q", b)
	}
	if out := cli.Run(0, "install", "plan", "acme"); !strings.Contains(out, "No changes: install acme matches app revision 1 (1 component unchanged)") {
		t.Fatalf("plan after the import:\n%s", out)
	}
	if out := cli.Run(0, "install", "drift", "acme", "--run"); !regexp.MustCompile(`env +in_sync`).MatchString(out) {
		t.Fatalf("drift after the import:\n%s", out)
	}
	if out := cli.Run(1, "component", "import", "acme", "env", target); !strings.Contains(out, "already runs component env") {
		t.Fatalf("second import:\n%s", out)
	}
	if out := cli.Run(0, "audit", "list", "--install", "acme"); !strings.Contains(out, "component.imported") {
		t.Errorf("audit:\n%s", out)
	}
}

// The import path is no way around the policies (the leftover "policies
// are not evaluated on import jobs"): a byoc component import of a type
// that evaluates policies goes through the customer's --policy-dir
// policies and the app's policies.toml, a deny fails the job naming the
// policy, nothing is adopted, and the denial is audited like an apply's.
func TestComponentImportPolicies(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	agentFlags := buildPlugin(t, cli, "gated", "e2e/testdata/gatedplugin", false)
	policyDir := t.TempDir()
	adopt := filepath.Join(policyDir, "adopt.rego")
	const rego = `package customer.adopt

deny contains msg if {
	input.operation == "import"
	some c in input.changes
	c.action == "import"
	startswith(c.address, "aws_iam_")
	msg := sprintf("%s: IAM objects are not adopted", [c.address])
}
`
	if err := os.WriteFile(adopt, []byte(rego), 0o600); err != nil {
		t.Fatal(err)
	}
	token := cli.PushApp(map[string]string{
		"app.toml":           "name = \"store\"\n",
		"installs/acme.toml": "",
		"components/role.toml": `type = "gated"
[config]
changes = [{ address = "aws_iam_role.admin", action = "create" }]
`,
		"components/bucket.toml": `type = "gated"
[config]
changes = [{ address = "aws_s3_bucket.logs", action = "create" }]
`,
		"policies.toml": "[[policy]]\nname = \"seen\"\nengine = \"rego\"\ncontents = \"package vendor.seen\\nwarn contains msg if { input.operation == \\\"import\\\"; msg := \\\"vendor saw the import\\\" }\\n\"\n",
	}).EnrollToken(t)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), append(agentFlags, "--policy-dir", policyDir)...)

	out, _, code := cli.Exec("component", "import", "acme", "role", "admin")
	if code == 0 || !strings.Contains(out, "denied by policy: aws_iam_role.admin: IAM objects are not adopted (customer policy "+adopt+")") {
		t.Fatalf("the import the customer's policy denies (exit %d):\n%s", code, out)
	}
	if strings.Contains(out, "adopted admin") {
		t.Fatalf("the plugin adopted a denied import:\n%s", out)
	}
	id := jobIDOf(t, cli.Run(0, "job", "list", "--install", "acme", "-o", "json"), "import")
	got := cli.Run(0, "job", "get", id)
	for _, want := range []string{"Policy: 1 denied, 1 warning\n", "deny [customer] " + adopt, "warn [vendor] policies.toml:seen: vendor saw the import"} {
		if !strings.Contains(got, want) {
			t.Errorf("job get lacks %q:\n%s", want, got)
		}
	}
	audit := cli.Run(0, "audit", "list", "--install", "acme")
	if !lineWith(audit, "job.finished", "job:"+id, "1 deny, 1 warn", "IAM objects are not adopted") || strings.Contains(audit, "component.imported") {
		t.Errorf("audit:\n%s", audit)
	}
	// What the policies allow is adopted.
	if out := cli.Run(0, "component", "import", "acme", "bucket", "logs"); !strings.Contains(out, "succeeded") {
		t.Fatalf("allowed import:\n%s", out)
	}
	if audit := cli.Run(0, "audit", "list", "--install", "acme"); !strings.Contains(audit, "component.imported") {
		t.Errorf("audit after the allowed import:\n%s", audit)
	}
}
