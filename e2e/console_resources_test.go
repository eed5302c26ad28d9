package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// TestConsoleResourcesDescribeAndSaveLog drives the real byoc console in
// tmux, on a CLI config with two contexts, against a real imsd and agent:
// :ctx lists the contexts, :apps and an app's revisions, :workflows, y on
// an install shows its YAML, and ctrl+s in a finished job's log writes
// JOB-ATTEMPT.log under $BYOC_LOG_DIR, the status line naming it.
func TestConsoleResourcesDescribeAndSaveLog(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, tok := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	cluster.StartAgent(t, ims.URL(), tok, t.TempDir())
	bin := filepath.Join(cluster.Binaries(t), "byoc")

	cfgPath := filepath.Join(t.TempDir(), "config.json")
	cfg, _ := json.Marshal(map[string]any{"current_context": "dev", "contexts": []map[string]string{
		{"name": "dev", "server": ims.URL(), "token": ims.AdminToken},
		{"name": "other", "server": "http://127.0.0.1:1", "token": "x"},
	}})
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	term := cluster.StartTerminal(t, 140, 32, []string{"BYOC_CONFIG=" + cfgPath, "BYOC_LOG_DIR=" + logDir}, bin)
	term.WaitFor("acme online", func(s string) bool { return lineWith(s, "acme", "online") })

	term.Keys(":")
	term.Type("ctx")
	term.Keys("Enter")
	term.WaitFor("the contexts", func(s string) bool {
		return lineWith(s, "*", "dev", ims.URL()) && lineWith(s, "other", "http://127.0.0.1:1")
	})

	term.Keys(":")
	term.Type("apps")
	term.Keys("Enter")
	term.WaitFor("the app", func(s string) bool { return lineWith(s, "shop", "app_") })
	term.Keys("Enter")
	term.WaitText("apps › shop revisions", "no revisions yet")

	term.Keys(":")
	term.Type("installs")
	term.Keys("Enter")
	term.WaitFor("acme online", func(s string) bool { return lineWith(s, "acme", "online") })
	term.Keys("y")
	term.WaitText("install acme (yaml)", "appName: shop", "agentId:")
	term.Keys("Escape")
	term.WaitFor("back on the fleet", func(s string) bool { return lineWith(s, "acme", "online") })
	term.Keys("Enter")
	term.WaitText("installs › acme")
	term.Keys("a")
	term.WaitText("ad-hoc script…")
	term.Keys("Enter")
	term.WaitText("script:")
	term.Type("echo saved-1; echo saved-2")
	term.Keys("Enter")
	term.WaitText("Confirm: run")
	term.Keys("y")
	term.WaitText("› logs", "saved-2", "succeeded (exit 0)")
	term.Keys("C-s")
	s := term.WaitText("saved ", logDir)
	ents, err := os.ReadDir(logDir)
	if err != nil || len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), "-1.log") {
		t.Fatalf("the log dir holds %v (%v), want one JOB-1.log\n%s", ents, err, s)
	}
	b, _ := os.ReadFile(filepath.Join(logDir, ents[0].Name()))
	if !strings.Contains(string(b), "saved-1\n") || !strings.Contains(string(b), "saved-2\n") {
		t.Fatalf("%s holds %q", ents[0].Name(), b)
	}
}
