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
