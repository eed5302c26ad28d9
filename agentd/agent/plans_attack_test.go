package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// planter is vendor code that attacks the agent through its component's
// state directory, which the sandbox lets it write: asked to (config
// "plant": a path), its plan replaces STATE_DIR/.byoc-plans with a
// symlink to that path, and with "keep_planting" it goes on doing so
// from the background for as long as the plugin lives (a local-exec
// provisioner's nohup loop would), racing the agent's own work there.
type planter struct{ planner }

func (planter) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{Type: "planter", Version: "1"}, nil
}
func (planter) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	plans := filepath.Join(req.Job.StateDir, sdk.PlanDirName)
	plant := func(target string) {
		os.RemoveAll(plans)
		os.Symlink(target, plans)
	}
	if target, _ := req.Config["plant"].(string); target != "" {
		plant(target)
		if keep, _ := req.Config["keep_planting"].(bool); keep {
			go func() {
				for {
					if fi, err := os.Lstat(plans); err != nil || fi.Mode()&os.ModeSymlink == 0 {
						plant(target)
					}
					time.Sleep(200 * time.Microsecond)
				}
			}()
		}
	}
	text, _ := req.Config["text"].(string)
	return &sdk.PlanResponse{PlannedChanges: []sdk.PlannedChange{{Address: "file.applied", Action: sdk.ActionUpdate,
		After: map[string]any{"text": text}, Summary: "write " + text}}}, nil
}

// The agent keeps a component's saved plans in the component's state
// directory, which the vendor's code may write, and works there from
// outside the sandbox. A .byoc-plans that vendor code turned into a
// symlink to the agent's own state directory must not lead the agent
// there: before the fix, the next plan's housekeeping deleted every file
// of the agent's state directory (identity.json, permissions.json,
// breakglass.json) and all but eight of its directories (audit/, logs/
// ...). The agent's files stay as they were whether the symlink is
// planted once or re-planted all the time, sandboxed or not, and a plan
// after a planted symlink saves its artifact in a real directory again.
func TestVendorCodeCannotLeadPlanHousekeepingOutOfTheStateDir(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := pluginhost.ProbeSandbox(t.Context(), pluginhost.SandboxOptions{Mode: "auto", InitExe: self})
	if err != nil {
		t.Logf("no sandbox here (%v): the attack is the same without one", err)
		sb = nil
	} else {
		t.Logf("plugins sandboxed: %s", sb.Detail)
	}
	state := t.TempDir()
	own := map[string]string{"identity.json": `{"key":"secret"}`, "permissions.json": `{"signed":true}`,
		"breakglass.json": `{}`, "seen-jobs": "job_0\n", "audit/journal.jsonl": "{}\n"}
	for _, d := range []string{"audit", "logs", "bundles", "registry", "policies", "plugins", "update", "sessions", "telemetry", "recordings"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range own {
		if err := os.WriteFile(filepath.Join(state, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	listing := func() []string {
		t.Helper()
		var names []string
		entries, err := os.ReadDir(state)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := append(listing(), "components", "jobs")
	slices.Sort(before)
	r := &agent.PluginRunner{Loader: &pluginhost.Loader{SelfExe: self, Builtins: []string{"planter"}, Sandbox: sb},
		WorkRoot: filepath.Join(state, "jobs"), StateRoot: filepath.Join(state, "components")}
	t.Cleanup(func() { r.Close() })
	intact := func(after string) {
		t.Helper()
		for name, text := range own {
			if b, err := os.ReadFile(filepath.Join(state, name)); err != nil || string(b) != text {
				t.Fatalf("after %s: the agent's %s is %q (%v), want %q", after, name, b, err, text)
			}
		}
		if got := listing(); !slices.Equal(got, before) {
			t.Fatalf("after %s: the agent's state directory holds %v, want %v", after, got, before)
		}
	}
	run := func(id, op, approved string, config map[string]any) (agent.Outcome, string) {
		t.Helper()
		var l logs
		out := r.Run(t.Context(), agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: "planter", Component: "app",
			Operation: op, Config: config, Timeout: time.Minute, ApprovedPlanDigest: approved},
			func(stream int32, text string) { l.add(stream, text) })
		return out, l.String()
	}
	plans := filepath.Join(state, "components", "app", sdk.PlanDirName)

	for _, target := range []string{state, "../.."} {
		// The plan that plants the symlink: filing its own artifact
		// through it is refused (or finds nothing); the agent's files
		// stay.
		run("job_plant", sdk.OpPlan, "", map[string]any{"plant": target, "text": "v1"})
		intact("a plan that planted " + target)
		if fi, err := os.Lstat(plans); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("the attack did not take place: %s is %v (%v)", plans, fi, err)
		}
		// The next plan's housekeeping (a fresh directory, keeping the
		// artifact, pruning) finds the symlink.
		out, log := run("job_next", sdk.OpPlan, "", map[string]any{"text": "v2"})
		intact("the next plan, with " + target + " planted")
		if out.Outcome != agentv1.Outcome_OUTCOME_SUCCEEDED {
			t.Fatalf("the plan after the symlink: %v %s\n%s", out.Outcome, out.Error, log)
		}
		if !strings.Contains(log, plans+" was a symlink, not the agent's directory of saved plans: removed") {
			t.Errorf("the job's log does not say the symlink was removed:\n%s", log)
		}
		if fi, err := os.Lstat(filepath.Join(plans, strings.TrimPrefix(out.PlanDigest, "sha256:"))); err != nil || !fi.IsDir() {
			t.Fatalf("the plan's artifact is not in a real directory: %v %v", fi, err)
		}
	}

	// Planted again and again from the background while the agent files
	// the plan, then an approved apply (its plan again, adopting the
	// artifact, clearing the plans) and a destroy with the symlink left
	// behind.
	planted, _ := run("job_race", sdk.OpPlan, "", map[string]any{"plant": state, "keep_planting": true, "text": "v3"})
	intact("a plan planting the symlink all the time")
	run("job_race2", sdk.OpPlan, "", map[string]any{"plant": state, "keep_planting": true, "text": "v3"})
	intact("a second such plan")
	run("job_apply", sdk.OpApply, planted.PlanDigest, map[string]any{"plant": state, "keep_planting": true, "text": "v3"})
	intact("an approved apply planting the symlink all the time")
	run("job_destroy", sdk.OpDestroy, "", map[string]any{"text": "v3"})
	intact("a destroy after it")
}
