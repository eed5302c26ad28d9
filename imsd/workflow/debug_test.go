package workflow

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

var debugCmds = map[string]string{
	"debug/logs.toml": `description = "Shows logs."
script = 'echo "$ARG_COMPONENT $ARG_NOTE"'
timeout = "2m"
[[arg]]
name = "component"
type = "component"
required = true
[[arg]]
name = "note"
`,
}

// A debug command's job: the action type in the maintenance mode, the
// script exactly as declared, the arguments only in its environment; an
// undeclared or ill-typed argument is refused naming it.
func TestEngineDebugJob(t *testing.T) {
	r := newRig(t, diamond(debugCmds), store.InstallSettings{Parallelism: 2})
	ctx := t.Context()
	in := r.installState()
	hostile := `x"; rm -rf / #$(id)`
	run, err := r.e.DebugJob(ctx, in, "logs", []string{"a"}, map[string]string{"note": hostile}, "tok")
	must(t, err)
	j := run.Job
	if j.ComponentType != ActionType || j.Operation != OpApply || j.Mode != store.ModeMaintenance || j.MaxAttempts != 1 ||
		j.Timeout.String() != "2m0s" || j.CreatedBy != "tok" || run.AppRevision != 1 {
		t.Fatalf("job %+v", j)
	}
	var cfg struct {
		Steps []struct {
			Script string
			Env    map[string]string
		}
	}
	must(t, json.Unmarshal(j.Config, &cfg))
	if len(cfg.Steps) != 1 || cfg.Steps[0].Script != `echo "$ARG_COMPONENT $ARG_NOTE"` ||
		cfg.Steps[0].Env["ARG_COMPONENT"] != "a" || cfg.Steps[0].Env["ARG_NOTE"] != hostile {
		t.Fatalf("config %s", j.Config)
	}
	for _, c := range []struct {
		name  string
		pos   []string
		named map[string]string
		want  string
	}{
		{"logs", []string{"zz"}, nil, `args.component: "zz" is not a component of the app`},
		{"logs", []string{"a"}, map[string]string{"cmd": "id"}, `args.cmd: debug command logs has no argument "cmd"`},
		{"logs", []string{"a", "b", "c"}, nil, "positional: debug command logs takes at most 2 positional arguments"},
		{"log", nil, nil, `command: no debug command named "log" in app revision 1; did you mean "logs"?`},
	} {
		_, err := r.e.DebugJob(ctx, in, c.name, c.pos, c.named, "tok")
		if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DebugJob(%s, %q, %v) = %v, want invalid %q", c.name, c.pos, c.named, err, c.want)
		}
	}
}
