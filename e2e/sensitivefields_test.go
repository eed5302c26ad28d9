package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// A config field its type's schema marks sensitive ("sensitive": true)
// is masked end to end: in every read of the job's config (byoc job get,
// text and JSON) and in its log, while the plugin gets the value (issue
// 29 item 5: a plain value showed in byoc job get's Config).
func TestSchemaSensitiveFieldMasked(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cli := cluster.NewCLI(t, ims)
	dir := t.TempDir()
	target := filepath.Join(dir, "app.env")
	flags := append(buildPlugin(t, cli, "kvfile", filepath.Join(cluster.RepoRoot(), "plugins", "examples", "kvfile"), true), "--sandbox-writable", dir)
	const secret = "s3cr3t-value-4711"
	token := cli.PushApp(map[string]string{
		"app.toml":           "name = \"envs\"\n",
		"installs/acme.toml": "",
		"components/env.toml": `type = "kvfile"
[config]
path = "` + target + `"
entries = { PORT = "8080" }
secret_entries = { TOKEN = "` + secret + `" }
`,
	}).EnrollToken(t)
	cluster.StartAgent(t, ims.URL(), token, t.TempDir(), flags...)
	out := cli.Run(0, "install", "provision", "acme", "--wait")
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("provision:\n%s", out)
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "TOKEN="+secret) {
		t.Fatalf("the plugin did not get the value: %q", b)
	}
	var wf struct {
		Steps []struct {
			Name  string `json:"name"`
			JobID string `json:"jobId"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(cli.Run(0, "workflow", "get", workflowID.FindString(out), "-o", "json")), &wf); err != nil || len(wf.Steps) == 0 {
		t.Fatalf("workflow get: %v %+v", err, wf)
	}
	job := wf.Steps[0].JobID
	for _, args := range [][]string{{"job", "get", job}, {"job", "get", job, "-o", "json"}, {"job", "logs", job}} {
		got := cli.Run(0, args...)
		if strings.Contains(got, secret) {
			t.Errorf("byoc %s shows the sensitive value:\n%s", strings.Join(args, " "), got)
		}
	}
	if got := cli.Run(0, "job", "get", job, "-o", "json"); !strings.Contains(got, "secret_entries") {
		t.Errorf("job get -o json lacks the field (masked):\n%s", got)
	}
}
