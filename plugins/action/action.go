// Package action is the built-in "action" component type: it runs a list
// of shell steps in the job's work directory and streams their output.
//
// Config:
//
//	{
//	  "steps": [{"name": "build", "script": "make", "timeout": "10m"}],
//	  "destroy_steps": [{"name": "teardown", "script": "..."}],
//	  "shell": "/bin/sh",
//	  "env": {"REGION": "eu-west-1"},
//	  "sandbox": {"network": false, "memory_mb": 512, "cpus": 1, "pids": 512}
//	}
//
// Each step runs as `<shell> -e -c <script>` with exactly the request's
// environment plus BYOC_OUTPUTS, the path of a file the step may write
// key=value lines to; those become the result's outputs. Steps stop at the
// first failure.
//
// Every step runs in a sandbox (package sandbox): read-only system root,
// private /tmp, only the work dir writable, no network unless the action
// sets sandbox.network, its own PID namespace, and cgroup limits. The job
// log says which isolation was applied and warns about whatever could not
// be.
package action

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/plugins/action/actionschema"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// TypeName is the component type this package implements.
const TypeName = "action"

// Version is the version of the action plugin.
const Version = "0.1.0"

const defaultShell = "/bin/sh"

// Plugin implements sdk.Plugin for the action type.
type Plugin struct {
	sandbox sandbox.Options
}

var (
	_ sdk.Plugin    = (*Plugin)(nil)
	_ sdk.Destroyer = (*Plugin)(nil)
)

// New returns the action plugin, sandboxing steps as well as this machine
// allows.
func New() *Plugin { return &Plugin{} }

// NewWithSandbox returns the action plugin with explicit sandbox options
// (to test a fallback, say).
func NewWithSandbox(opt sandbox.Options) *Plugin { return &Plugin{sandbox: opt} }

// Default limits for a step.
const (
	defaultMemoryMB = 512
	defaultCPUs     = 1.0
	defaultPIDs     = 512
)

// Describe reports the action type and its config schema.
func (p *Plugin) Describe(context.Context, *sdk.DescribeRequest) (*sdk.DescribeResponse, error) {
	return &sdk.DescribeResponse{
		Type:         TypeName,
		Version:      Version,
		ConfigSchema: actionschema.Config,
	}, nil
}

// Validate checks the config and names each offending field.
func (p *Plugin) Validate(_ context.Context, req *sdk.ValidateRequest) (*sdk.ValidateResponse, error) {
	_, diags := parseConfig(req.Config)
	return &sdk.ValidateResponse{Diagnostics: diags}, nil
}

// Plan describes the steps Apply would run without running them.
func (p *Plugin) Plan(_ context.Context, req *sdk.PlanRequest) (*sdk.PlanResponse, error) {
	cfg, err := configOrError(req.Config)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "would run %d step(s) with %s:\n", len(cfg.Steps), cfg.Shell)
	for i, s := range cfg.Steps {
		fmt.Fprintf(&b, "  %d. %s: %s\n", i+1, s.Name, firstLine(s.Script))
	}
	changes := strings.TrimRight(b.String(), "\n")
	for _, line := range strings.Split(changes, "\n") {
		req.Log.System(line)
	}
	return &sdk.PlanResponse{Changes: changes}, nil
}

// Apply runs the steps in order and stops at the first failure.
func (p *Plugin) Apply(ctx context.Context, req *sdk.ApplyRequest) (*sdk.ApplyResponse, error) {
	cfg, err := configOrError(req.Config)
	if err != nil {
		return nil, err
	}
	code, outputs, err := p.runSteps(ctx, cfg, cfg.Steps, req.Job, req.Env, req.Log)
	return &sdk.ApplyResponse{ExitCode: code, Outputs: outputs}, err
}

// Destroy runs destroy_steps if the config has any and otherwise succeeds:
// an action leaves nothing behind that the plugin knows how to remove.
func (p *Plugin) Destroy(ctx context.Context, req *sdk.DestroyRequest) (*sdk.DestroyResponse, error) {
	cfg, err := configOrError(req.Config)
	if err != nil {
		return nil, err
	}
	if len(cfg.DestroySteps) == 0 {
		req.Log.System("no destroy_steps: nothing to destroy")
		return &sdk.DestroyResponse{}, nil
	}
	code, outputs, err := p.runSteps(ctx, cfg, cfg.DestroySteps, req.Job, req.Env, req.Log)
	return &sdk.DestroyResponse{ExitCode: code, Outputs: outputs}, err
}

type step struct {
	Name    string
	Script  string
	Timeout time.Duration
	Env     map[string]string
}

type config struct {
	Steps        []step
	DestroySteps []step
	Shell        string
	Env          map[string]string
	Network      bool
	Limits       sandbox.Limits
}

func configOrError(m map[string]any) (config, error) {
	cfg, diags := parseConfig(m)
	if len(diags) == 0 {
		return cfg, nil
	}
	msgs := make([]string, len(diags))
	for i, d := range diags {
		msgs[i] = d.Field + ": " + d.Message
	}
	return cfg, fmt.Errorf("invalid config: %s", strings.Join(msgs, "; "))
}

// parseConfig decodes the config by hand rather than through JSON so that
// every problem is reported with the path of its field.
func parseConfig(m map[string]any) (config, []sdk.Diagnostic) {
	cfg := config{Shell: defaultShell, Limits: sandbox.Limits{MemoryBytes: defaultMemoryMB << 20, CPUs: defaultCPUs, PIDs: defaultPIDs}}
	var diags []sdk.Diagnostic
	bad := func(field, msg string) { diags = append(diags, sdk.Diagnostic{Field: field, Message: msg}) }

	for k := range m {
		switch k {
		case "steps", "destroy_steps", "shell", "sandbox", "env":
		default:
			bad(k, "unknown field")
		}
	}
	if v, ok := m["shell"]; ok {
		s, isString := v.(string)
		switch {
		case !isString:
			bad("shell", "must be a string")
		case s == "":
			bad("shell", "must not be empty")
		default:
			cfg.Shell = s
		}
	}
	if v, ok := m["sandbox"]; ok {
		parseSandbox(v, &cfg, bad)
	}
	if v, ok := m["env"]; ok {
		cfg.Env = parseEnv("env", v, bad)
	}
	steps, ok := m["steps"]
	if !ok {
		bad("steps", "is required")
	} else {
		cfg.Steps = parseSteps("steps", steps, bad)
		if list, isList := steps.([]any); isList && len(list) == 0 {
			bad("steps", "must not be empty")
		}
	}
	if v, ok := m["destroy_steps"]; ok {
		cfg.DestroySteps = parseSteps("destroy_steps", v, bad)
	}
	return cfg, diags
}

func parseSteps(field string, v any, bad func(field, msg string)) []step {
	list, ok := v.([]any)
	if !ok {
		bad(field, "must be a list of steps")
		return nil
	}
	steps := make([]step, 0, len(list))
	for i, item := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		obj, ok := item.(map[string]any)
		if !ok {
			bad(at, "must be an object with a script")
			continue
		}
		s := step{Name: fmt.Sprintf("%s[%d]", field, i)}
		for k, val := range obj {
			switch k {
			case "name":
				name, ok := val.(string)
				if !ok {
					bad(at+".name", "must be a string")
				} else if name != "" {
					s.Name = name
				}
			case "timeout":
				str, ok := val.(string)
				d, err := time.ParseDuration(str)
				switch {
				case !ok:
					bad(at+".timeout", "must be a duration such as \"30s\"")
				case err != nil || d <= 0:
					bad(at+".timeout", fmt.Sprintf("%q is not a positive duration such as \"30s\"", str))
				default:
					s.Timeout = d
				}
			case "env":
				s.Env = parseEnv(at+".env", val, bad)
			case "script":
				script, ok := val.(string)
				if !ok {
					bad(at+".script", "must be a string")
				} else {
					s.Script = script
				}
			default:
				bad(at+"."+k, "unknown field")
			}
		}
		if _, ok := obj["script"]; !ok {
			bad(at+".script", "is required")
		} else if _, isString := obj["script"].(string); isString && strings.TrimSpace(s.Script) == "" {
			bad(at+".script", "must not be empty")
		}
		steps = append(steps, s)
	}
	return steps
}

// envNameRE is what a step's environment variable may be called.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func parseEnv(field string, v any, bad func(field, msg string)) map[string]string {
	obj, ok := v.(map[string]any)
	if !ok {
		bad(field, "must be an object of strings")
		return nil
	}
	env := make(map[string]string, len(obj))
	for k, val := range obj {
		s, ok := val.(string)
		switch {
		case !envNameRE.MatchString(k):
			bad(field+"."+k, "is not a valid environment variable name")
		case strings.HasPrefix(k, "BYOC_"):
			bad(field+"."+k, "BYOC_ variables are set by the agent")
		case !ok:
			bad(field+"."+k, "must be a string")
		default:
			env[k] = s
		}
	}
	return env
}

func parseSandbox(v any, cfg *config, bad func(field, msg string)) {
	obj, ok := v.(map[string]any)
	if !ok {
		bad("sandbox", "must be an object")
		return
	}
	num := func(k string, minimum float64) (float64, bool) {
		f, ok := obj[k].(float64)
		if !ok {
			bad("sandbox."+k, "must be a number")
			return 0, false
		}
		if f < minimum {
			bad("sandbox."+k, fmt.Sprintf("must be at least %g", minimum))
			return 0, false
		}
		return f, true
	}
	for k, val := range obj {
		switch k {
		case "network":
			b, ok := val.(bool)
			if !ok {
				bad("sandbox.network", "must be true or false")
			}
			cfg.Network = b
		case "memory_mb":
			if f, ok := num(k, 16); ok {
				cfg.Limits.MemoryBytes = int64(f) << 20
			}
		case "cpus":
			if f, ok := num(k, 0.01); ok {
				cfg.Limits.CPUs = f
			}
		case "pids":
			if f, ok := num(k, 8); ok {
				cfg.Limits.PIDs = int(f)
			}
		default:
			bad("sandbox."+k, "unknown field")
		}
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
