package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/action"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// The test binary serves the built-in action type when re-executed, the
// way agentd does.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "action" {
		sdk.ServeArgs(action.New(), os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "gated" {
		sdk.ServeArgs(gated{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "helm" {
		sdk.ServeArgs(kubeEnv{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "printer" {
		sdk.ServeArgs(printer{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "planner" {
		sdk.ServeArgs(planner{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "planter" {
		sdk.ServeArgs(planter{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "destroyer" {
		sdk.ServeArgs(destroyer{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "importer" {
		sdk.ServeArgs(importer{}, os.Args[3:])
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "remover" {
		sdk.ServeArgs(remover{}, os.Args[3:])
	}
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitArg {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

type line struct {
	stream int32
	text   string
}

func runJob(t *testing.T, secrets map[string]string, config map[string]any) (agent.Outcome, []line) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:   &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}},
		WorkRoot: t.TempDir(),
		Secrets:  secrets,
	}
	var mu sync.Mutex
	var lines []line
	out := r.Run(t.Context(), agent.Job{ID: "job1", InstallID: "ins1", Attempt: 1, ComponentType: "action",
		Operation: sdk.OpApply, Config: config, Timeout: time.Minute},
		func(stream int32, text string) {
			mu.Lock()
			lines = append(lines, line{stream, text})
			mu.Unlock()
		})
	return out, lines
}

// A secret never leaves the agent: not in a log line, not split across two
// log events, not in the error, not in the outputs.
func TestSecretsAreRedacted(t *testing.T) {
	const secret = "hunter2-correct-horse"
	// 65,530 x's and then the secret: the action type splits lines at
	// 64 KiB, so the secret arrives in two log events.
	script := `head -c 65530 /dev/zero | tr '\0' x; echo "$DB_PASSWORD"
echo "password is $DB_PASSWORD"
echo "$DB_PASSWORD" >&2
echo "dsn=postgres://app:$DB_PASSWORD@db" >"$BYOC_OUTPUTS"
echo "also the unused one: $OTHER"
exit 0`
	out, lines := runJob(t, map[string]string{"DB_PASSWORD": secret, "OTHER": "t-unused-secret-value"}, map[string]any{
		"secrets": []any{"DB_PASSWORD"},
		"steps":   []any{map[string]any{"script": script}},
	})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("outcome %v: %s", out.Outcome, out.Error)
	}
	var all strings.Builder
	split := false
	for i, l := range lines {
		all.WriteString(l.text + "\n")
		for j := 0; j+5 <= len(secret); j++ {
			if strings.Contains(l.text, secret[j:j+5]) {
				t.Errorf("line %d leaks %q: %.80q", i, secret[j:j+5], l.text)
			}
		}
		if strings.HasSuffix(l.text, "xxx***") && i+1 < len(lines) && lines[i+1].text == "***" {
			split = true
		}
	}
	if !split {
		t.Errorf("the secret split across two events was not masked in both")
	}
	for _, want := range []string{"password is ***", "also the unused one: \n"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// The step's start line ends in "t", like the start of the OTHER
	// secret: it is held back until more is known, and the step's output
	// waits behind it, never overtaking it.
	start := slices.IndexFunc(lines, func(l line) bool { return strings.HasSuffix(l.text, ": start") })
	first := slices.IndexFunc(lines, func(l line) bool { return strings.HasPrefix(l.text, "xxxx") })
	if start < 0 || first < start {
		t.Errorf("the step's output came before its start line (%d, %d)", start, first)
	}
	if out.Outputs["dsn"] != "postgres://app:***@db" {
		t.Errorf("outputs = %v", out.Outputs)
	}
}

func TestSecretErrors(t *testing.T) {
	const secret = "s3cr3t-in-an-error"
	out, _ := runJob(t, map[string]string{"TOKEN": secret}, map[string]any{
		"secrets": []any{"TOKEN"},
		"steps":   []any{map[string]any{"name": "bad " + secret, "script": "exit 4"}},
	})
	if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || strings.Contains(out.Error, secret) || !strings.Contains(out.Error, `step "bad ***" failed with exit code 4`) {
		t.Errorf("outcome %v, error %q", out.Outcome, out.Error)
	}
	for _, tt := range []struct {
		secrets any
		want    string
	}{
		{[]any{"NOPE"}, `config.secrets[0]: secret "NOPE" is not defined on this agent`},
		{"TOKEN", "config.secrets: must be a list of secret names"},
		{[]any{"TOKEN", "a-b"}, "config.secrets[1]: must be a secret name"},
	} {
		out, _ := runJob(t, map[string]string{"TOKEN": secret}, map[string]any{
			"secrets": tt.secrets, "steps": []any{map[string]any{"script": "true"}},
		})
		if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, tt.want) {
			t.Errorf("secrets %v: outcome %v, error %q, want %q", tt.secrets, out.Outcome, out.Error, tt.want)
		}
	}
}

// Sweep removes the workspaces a killed agent left and keeps a running
// job's; a second runner on the same work root (another agentd on the
// same state dir) leaves them all alone until the first lets go.
func TestSweepWorkspaces(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	r := &agent.PluginRunner{Loader: &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}}, WorkRoot: root}
	t.Cleanup(func() { r.Close() })
	left := filepath.Join(root, "job_old-2")
	if err := os.MkdirAll(filepath.Join(left, "deep", "er"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "deep", "er", "state.tfstate"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	done := make(chan agent.Outcome, 1)
	go func() {
		done <- r.Run(t.Context(), agent.Job{ID: "job_live", InstallID: "ins1", Attempt: 1, ComponentType: "action", Operation: sdk.OpApply,
			Config:  map[string]any{"steps": []any{map[string]any{"script": "touch started; while [ ! -e go ]; do sleep 0.02; done"}}},
			Timeout: time.Minute}, func(int32, string) {})
	}()
	live := filepath.Join(root, "job_live-1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(live, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job never started")
		}
		time.Sleep(10 * time.Millisecond)
	}

	other := &agent.PluginRunner{WorkRoot: root}
	t.Cleanup(func() { other.Close() })
	swept, err := other.Sweep()
	if err == nil || !strings.Contains(err.Error(), "another agentd holds") || len(swept.Workspaces) != 0 {
		t.Fatalf("a second runner on the same root swept %v, %v; want nothing and a refusal", swept.Workspaces, err)
	}

	swept, err = r.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(swept.Workspaces, []string{left}) {
		t.Errorf("swept workspaces %v, want only the leftover %s", swept.Workspaces, left)
	}
	if _, err := os.Stat(filepath.Join(live, "started")); err != nil {
		t.Fatalf("the running job's workspace was touched: %v", err)
	}
	if err := os.WriteFile(filepath.Join(live, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := <-done; out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("the running job failed: %s", out.Error)
	}
	if _, err := os.Stat(live); !os.IsNotExist(err) {
		t.Errorf("the finished job's workspace is still there: %v", err)
	}

	// Once the first runner lets go (its agent exited), the other may sweep.
	r.Close()
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if swept, err := other.Sweep(); err != nil || !slices.Equal(swept.Workspaces, []string{left}) {
		t.Errorf("after the first runner closed: swept %v, %v; want %s", swept.Workspaces, err, left)
	}
}

// The install registry reaches every job: its location in the plugin's
// environment, its credentials (secrets the config need not list) in the
// operation's, redacted like every secret.
func TestInstallRegistryReachesEveryJob(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:          &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}},
		WorkRoot:        t.TempDir(),
		Secrets:         map[string]string{"BYOC_INSTALL_REGISTRY_PASSWORD": "reg-pass-123", "OTHER": "other-secret"},
		InstallRegistry: "oci:/var/lib/byoc/registry",
	}
	script := `echo "registry=$BYOC_INSTALL_REGISTRY" >"$BYOC_OUTPUTS"
echo "password=$BYOC_INSTALL_REGISTRY_PASSWORD" >>"$BYOC_OUTPUTS"
echo "other=$OTHER" >>"$BYOC_OUTPUTS"`
	out := r.Run(t.Context(), agent.Job{ID: "job1", InstallID: "ins1", Attempt: 1, ComponentType: "action",
		Operation: sdk.OpApply, Config: map[string]any{"steps": []any{map[string]any{"script": script}}}, Timeout: time.Minute},
		func(int32, string) {})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("outcome %v: %s", out.Outcome, out.Error)
	}
	want := map[string]string{"registry": "oci:/var/lib/byoc/registry", "password": "***", "other": ""}
	for k, v := range want {
		if out.Outputs[k] != v {
			t.Errorf("output %s = %q, want %q (all: %v)", k, out.Outputs[k], v, out.Outputs)
		}
	}
}
