package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/agentd/stack"
	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/internal/stackconfig"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Each job runs with its mode's role: the agent assumes it through STS
// (the real SDK against a local fake) and hands the operation those
// short-lived credentials only, masked in everything sent back; a mode the
// stack turned off fails the job before any plugin starts, naming the role
// and the stack parameter.
func TestJobRunsWithItsModeRole(t *testing.T) {
	const (
		agentKey = "AKIAAGENTOWNKEY1"
		agentSec = "agent-own-secret-access-key"
		provARN  = "arn:aws:iam::123456789012:role/acme-ProvisionRole"
	)
	fake := awsfake.New(t)
	fake.AddRole(provARN, agentKey)
	t.Setenv("AWS_ACCESS_KEY_ID", agentKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", agentSec)
	c := stackconfig.Config{Version: 1, Format: "cloudformation", Install: "acme", IMS: "https://ims.example.com", Region: "eu-west-1",
		Modes: map[string]stackconfig.Role{
			"provision":   {Enabled: true, ARN: provARN, Name: "ProvisionRole", Parameter: "EnableProvision"},
			"maintenance": {Enabled: false, Name: "MaintenanceRole", Parameter: "EnableMaintenance"},
		},
		Endpoints: map[string]string{"sts": fake.STS.URL, "secretsmanager": fake.SecretsManager.URL}}
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := stack.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logRoot := t.TempDir()
	r := &agent.PluginRunner{
		Loader:   &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}},
		WorkRoot: t.TempDir(),
		LogRoot:  logRoot,
		Credentials: func(ctx context.Context, job agent.Job) (map[string]string, []string, error) {
			cr, err := st.Assume(ctx, job.Mode, "", job.ID, job.Timeout, time.Time{})
			return cr.Env, cr.Secret, err
		},
	}
	run := func(id, mode string) (agent.Outcome, string) {
		var mu sync.Mutex
		var all strings.Builder
		script := `echo "key=$AWS_ACCESS_KEY_ID" >"$BYOC_OUTPUTS"
echo "secret $AWS_SECRET_ACCESS_KEY token $AWS_SESSION_TOKEN region $AWS_REGION"
env | grep -c AKIAAGENTOWNKEY1 || true`
		out := r.Run(t.Context(), agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: "action", Operation: sdk.OpApply, Mode: mode,
			Config: map[string]any{"steps": []any{map[string]any{"script": script}}}, Timeout: time.Minute},
			func(_ int32, text string) { mu.Lock(); all.WriteString(text + "\n"); mu.Unlock() })
		return out, all.String()
	}

	out, logs := run("job1", "provision")
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
		t.Fatalf("provision job: %v %s\n%s", out.Outcome, out.Error, logs)
	}
	issued := fake.Issued()
	if len(issued) != 1 || issued[0].RoleARN != provARN {
		t.Fatalf("issued %+v", issued)
	}
	if out.Outputs["key"] != issued[0].AccessKeyID {
		t.Errorf("the job's AWS_ACCESS_KEY_ID %q, want the assumed role's %q", out.Outputs["key"], issued[0].AccessKeyID)
	}
	for _, leak := range []string{issued[0].SecretAccessKey, issued[0].SessionToken, agentSec} {
		if strings.Contains(logs, leak) {
			t.Errorf("log leaks %q:\n%s", leak, logs)
		}
	}
	if !strings.Contains(logs, "secret *** token *** region eu-west-1") || !strings.Contains(logs, "running with role "+provARN) {
		t.Errorf("log:\n%s", logs)
	}
	if !strings.Contains(logs, "\n0\n") {
		t.Errorf("the agent's own key reached the job's environment:\n%s", logs)
	}
	local, err := os.ReadFile(filepath.Join(logRoot, "job1-1.log"))
	if err != nil || !strings.Contains(string(local), "secret *** token ***") || strings.Contains(string(local), issued[0].SecretAccessKey) {
		t.Errorf("local job log (%v):\n%s", err, local)
	}

	out, logs = run("job2", "maintenance")
	if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "MaintenanceRole") || !strings.Contains(out.Error, "EnableMaintenance=true") {
		t.Errorf("disabled mode: %v %q", out.Outcome, out.Error)
	}
	if strings.Contains(logs, "started in") || len(fake.Issued()) != 1 {
		t.Errorf("a plugin started or a role was assumed for a disabled mode:\n%s", logs)
	}
}

// A job's customer-provided inputs come from the install stack's values:
// each {{ .inputs.NAME }} the config's "customer_inputs" list names is
// replaced (sensitive values redacted like secrets); one the stack does not
// set fails the job naming its stack parameter.
func TestCustomerInputsFromStack(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &agent.PluginRunner{
		Loader:   &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}},
		WorkRoot: t.TempDir(),
		Inputs:   map[string]string{"team": "platform", "admin_email": "ops@acme.example"},
		Redact:   []string{"ops@acme.example"},
	}
	run := func(cfg map[string]any) (agent.Outcome, string) {
		var mu sync.Mutex
		var all strings.Builder
		out := r.Run(t.Context(), agent.Job{ID: "j", InstallID: "ins1", Attempt: 1, ComponentType: "action", Operation: sdk.OpApply, Mode: "maintenance",
			Config: cfg, Timeout: time.Minute},
			func(_ int32, text string) { mu.Lock(); all.WriteString(text + "\n"); mu.Unlock() })
		return out, all.String()
	}
	out, logs := run(map[string]any{
		"customer_inputs": []any{"team", "admin_email"},
		"env":             map[string]any{"T": "team {{ .inputs.team }}", "A": "{{ .inputs.admin_email }}"},
		"steps":           []any{map[string]any{"script": `echo "t=$T a=$A"; echo "t=$T" >> $BYOC_OUTPUTS`}},
	})
	if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED || out.Outputs["t"] != "team platform" {
		t.Fatalf("%v %s %v\n%s", out.Outcome, out.Error, out.Outputs, logs)
	}
	if !strings.Contains(logs, "t=team platform a=***") || strings.Contains(logs, "ops@acme") {
		t.Errorf("log:\n%s", logs)
	}
	out, _ = run(map[string]any{
		"customer_inputs": []any{"region"},
		"env":             map[string]any{"R": "{{ .inputs.region }}"},
		"steps":           []any{map[string]any{"script": "true"}},
	})
	if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, `customer input "region" is not set`) || !strings.Contains(out.Error, "InputRegion") {
		t.Errorf("unset customer input: %v %q", out.Outcome, out.Error)
	}
}
