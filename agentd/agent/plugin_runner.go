package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// PluginRunner runs each job in a fresh component plugin subprocess, in a
// workspace of its own under WorkRoot.
type PluginRunner struct {
	Loader   *pluginhost.Loader
	WorkRoot string
}

// Run implements Runner.
func (r *PluginRunner) Run(ctx context.Context, job Job, log func(int32, string)) Outcome {
	fail := func(format string, args ...any) Outcome {
		msg := fmt.Sprintf(format, args...)
		log(StreamSystem, "[agentd] "+msg)
		return Outcome{Outcome: agentv1.Outcome_OUTCOME_FAILED, ExitCode: -1, Error: msg}
	}
	work := filepath.Join(r.WorkRoot, fmt.Sprintf("%s-%d", job.ID, job.Attempt))
	// A previous agent process may have left this attempt's workspace.
	if err := os.RemoveAll(work); err != nil {
		return fail("clear workspace: %v", err)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return fail("create workspace: %v", err)
	}
	defer os.RemoveAll(work)

	// The plugin and what it runs see this environment and nothing of the
	// agent's own: no inherited cloud credentials.
	env := map[string]string{
		"PATH":            "/usr/local/bin:/usr/bin:/bin",
		"HOME":            work,
		"TMPDIR":          work,
		"LANG":            "C.UTF-8",
		"BYOC_JOB_ID":     job.ID,
		"BYOC_INSTALL_ID": job.InstallID,
		"BYOC_ATTEMPT":    fmt.Sprint(job.Attempt),
		"BYOC_OPERATION":  job.Operation,
	}
	started := time.Now()
	inst, err := r.Loader.Start(ctx, job.ComponentType, pluginhost.StartOptions{WorkDir: work, Env: env})
	if err != nil {
		return fail("start plugin for type %q: %v", job.ComponentType, err)
	}
	defer inst.Kill()
	d := inst.Description()
	log(StreamSystem, fmt.Sprintf("[agentd] %s %s: attempt %d, plugin %s %s started in %s (pid group %d, protocol %s)",
		job.ComponentType, job.Operation, job.Attempt, d.Type, d.Version, time.Since(started).Round(time.Millisecond), inst.PGID(), d.Negotiated))

	v, err := inst.Validate(ctx, job.Config)
	if err != nil {
		if ctx.Err() != nil {
			return Outcome{}
		}
		return fail("validate config: %v", err)
	}
	if len(v.Diagnostics) > 0 {
		var b strings.Builder
		for i, d := range v.Diagnostics {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "config.%s: %s", d.Field, d.Message)
		}
		return fail("invalid %s config: %s", job.ComponentType, b.String())
	}
	res, err := inst.Run(ctx, job.Operation, &sdk.RunRequest{
		Job:    sdk.JobContext{JobID: job.ID, InstallID: job.InstallID, Attempt: int(job.Attempt), WorkDir: work, Timeout: job.Timeout},
		Config: job.Config,
		Env:    env,
	}, func(e sdk.LogEvent) { log(int32(e.Stream), e.Text) })
	if ctx.Err() != nil {
		return Outcome{} // the agent reports the cause
	}
	if err != nil {
		return fail("%v", err)
	}
	out := Outcome{Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED, ExitCode: int32(res.ExitCode), Outputs: res.Outputs}
	if res.Error != "" || res.ExitCode != 0 {
		out.Outcome = agentv1.Outcome_OUTCOME_FAILED
		out.Error = res.Error
		if out.Error == "" {
			out.Error = fmt.Sprintf("exit code %d", res.ExitCode)
		}
	}
	return out
}
