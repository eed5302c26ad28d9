package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// An action job run by the agent with its plugin sandboxed keeps its
// steps' limits: the agent delegates the plugin a cgroup, the step past
// sandbox.memory_mb is killed for it and the job fails saying so; the
// cgroup is gone when the job ends.
func TestActionStepLimitsInPluginSandbox(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("cgroups are writable for root here only")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"bubblewrap", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			sb, err := pluginhost.ProbeSandbox(t.Context(), pluginhost.SandboxOptions{Mode: mode, InitExe: self})
			if err != nil {
				t.Fatal(err)
			}
			r := &agent.PluginRunner{
				Loader:   &pluginhost.Loader{SelfExe: self, Builtins: []string{"action"}, Sandbox: sb},
				WorkRoot: t.TempDir(),
			}
			id := fmt.Sprintf("lim_%s_%d", mode, os.Getpid())
			var mu sync.Mutex
			var log strings.Builder
			out := r.Run(t.Context(), agent.Job{ID: id, InstallID: "ins1", Attempt: 1, ComponentType: "action",
				Operation: sdk.OpApply, Timeout: time.Minute, Config: map[string]any{
					"sandbox": map[string]any{"memory_mb": 32},
					"steps": []any{map[string]any{"name": "big",
						"script": `echo before; perl -e '$x = "a" x (256 << 20); print length($x), "\n"'; echo after`}},
				}},
				func(_ int32, text string) {
					mu.Lock()
					log.WriteString(text + "\n")
					mu.Unlock()
				})
			mu.Lock()
			all := log.String()
			mu.Unlock()
			if out.Outcome != agentv1.Outcome_OUTCOME_FAILED || !strings.Contains(out.Error, "killed: exceeded its memory limit of 32 MiB") {
				t.Errorf("outcome %v, error %q; log:\n%s", out.Outcome, out.Error, all)
			}
			if strings.Contains(all, "\nafter\n") || strings.Contains(all, "no CPU, memory or process limits") {
				t.Errorf("the step ran without its limits:\n%s", all)
			}
			if !strings.Contains(all, "cgroup v") {
				t.Errorf("the job log does not name the cgroup limits:\n%s", all)
			}
			if left := delegated(t, id); len(left) > 0 {
				t.Errorf("the job left its cgroups %v", left)
			}
		})
	}
}

// delegated lists the cgroups delegated for job id below this process's
// cgroups, v1 or v2.
func delegated(t *testing.T, id string) []string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", parts[2])
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				dir = filepath.Join("/sys/fs/cgroup", c, parts[2])
			}
		}
		m, _ := filepath.Glob(filepath.Join(dir, "byoc-job-*-"+id+"-*"))
		found = append(found, m...)
	}
	return found
}
