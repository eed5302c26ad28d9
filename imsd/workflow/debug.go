package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	"github.com/byoc-dev/byoc/schema/app/config"
	"github.com/byoc-dev/byoc/schema/app/diag"
)

// DebugMode is the permission mode of a debug command's job: it reads,
// as a drift check does, so it needs no break-glass grant, and the
// customer's modes still apply (maintenance off: the agent refuses it).
const DebugMode = store.ModeMaintenance

const defaultDebugTimeout = 5 * time.Minute

// DebugRun is a debug command's job, ready to queue, and what it runs.
type DebugRun struct {
	Job         store.Job
	Command     *config.DebugCommand
	Args        map[string]string // every argument's value, by name (sensitive ones "***")
	AppRevision int64
	// SensitiveEnv are the sensitive arguments' values by environment
	// variable: never in Job.Config (which holds "***" and names them
	// under SensitiveEnvKey); hold them with Engine.Sensitive before the
	// job is queued.
	SensitiveEnv map[string]string
}

// DebugJob builds the job of one run of debug command name (debug/*.toml)
// in install in: the arguments are checked against their declared shapes
// here, whatever the client checked (config.DebugCommand.Bind), and go
// into the script's environment only (ARG_NAME), never its text. The job
// is of the action type, in DebugMode.
func (e *Engine) DebugJob(ctx context.Context, in store.Install, name string, positional []string, named map[string]string, createdBy string) (DebugRun, error) {
	app, rev, err := e.InstallRevision(ctx, in)
	if err != nil {
		return DebugRun{}, err
	}
	d := app.DebugCommand(name)
	if d == nil {
		var names []string
		for _, d := range app.DebugCommands {
			names = append(names, d.Name)
		}
		if len(names) == 0 {
			return DebugRun{}, errs.Field("command", "no debug command named %q: app revision %d declares none (debug/*.toml)", name, rev)
		}
		hint := diag.DidYouMean(name, names)
		if hint != "" {
			hint += " "
		}
		return DebugRun{}, errs.Field("command", "no debug command named %q in app revision %d; %sits debug commands: %s", name, rev, hint, strings.Join(names, ", "))
	}
	vals, err := d.Bind(positional, named, app.DebugComponents())
	if ae := (*config.ArgError)(nil); errors.As(err, &ae) {
		if ae.Arg == "" {
			return DebugRun{}, errs.Field("positional", "%s", ae.Problem)
		}
		return DebugRun{}, errs.Field("args."+ae.Arg, "%s", ae.Problem)
	} else if err != nil {
		return DebugRun{}, err
	}
	step := map[string]any{"name": d.Name, "script": d.Script}
	masked := d.Masked(vals)
	var sensitive map[string]string
	if len(vals) > 0 {
		env := map[string]any{}
		for k, v := range config.Env(masked) {
			env[k] = v
		}
		step["env"] = env
	}
	cfg := map[string]any{"steps": []any{step}, "sandbox": map[string]any{"network": d.Network}}
	for _, a := range d.Args {
		if v, ok := vals[a.Name]; ok && a.Sensitive {
			if sensitive == nil {
				sensitive = map[string]string{}
			}
			sensitive[config.EnvName(a.Name)] = v
		}
	}
	if sensitive != nil {
		names := make([]any, 0, len(sensitive))
		for _, k := range slices.Sorted(maps.Keys(sensitive)) {
			names = append(names, k)
		}
		cfg[SensitiveEnvKey] = names
	}
	if err := agentproto.CheckConfig(cfg); err != nil {
		return DebugRun{}, errs.Field("args", "%v", err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return DebugRun{}, err
	}
	now := e.now()
	j := store.Job{ID: auth.NewSortableID("job_", now), InstallID: in.ID, ComponentType: ActionType, Operation: OpApply,
		Config: b, MaxAttempts: 1, Timeout: timeoutOr(d.Timeout, defaultDebugTimeout), CreatedAt: now, CreatedBy: createdBy,
		Mode: DebugMode, State: store.JobQueued}
	return DebugRun{Job: j, Command: d, Args: masked, AppRevision: rev, SensitiveEnv: sensitive}, nil
}
