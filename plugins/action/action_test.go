package action_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/plugins/action"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// steps builds a config from name, script pairs.
func steps(pairs ...string) map[string]any {
	var list []any
	for i := 0; i < len(pairs); i += 2 {
		list = append(list, map[string]any{"name": pairs[i], "script": pairs[i+1]})
	}
	return map[string]any{"steps": list}
}

func apply(tb testing.TB, cfg map[string]any, env map[string]string) (*sdk.Result, []sdk.LogEvent, string) {
	tb.Helper()
	dir := tb.TempDir()
	c := sdktest.Start(tb, action.New())
	res, logs := sdktest.Run(tb, c, sdk.OpApply, &sdk.RunRequest{
		Job:    sdk.JobContext{JobID: "j1", WorkDir: dir},
		Config: cfg,
		Env:    env,
	})
	return res, logs, dir
}

func texts(logs []sdk.LogEvent, s sdk.Stream) []string {
	var out []string
	for _, l := range logs {
		if l.Stream == s {
			out = append(out, l.Text)
		}
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]any
		want   []string // fields with diagnostics
	}{
		{"ok", steps("a", "echo hi"), nil},
		{"ok with shell and destroy", map[string]any{
			"steps": []any{map[string]any{"script": "true"}}, "shell": "/bin/bash",
			"destroy_steps": []any{map[string]any{"script": "true"}},
		}, nil},
		{"missing steps", map[string]any{}, []string{"steps"}},
		{"empty steps", map[string]any{"steps": []any{}}, []string{"steps"}},
		{"steps not a list", map[string]any{"steps": "echo"}, []string{"steps"}},
		{"second script empty", steps("a", "true", "b", "  "), []string{"steps[1].script"}},
		{"script missing", map[string]any{"steps": []any{map[string]any{"name": "x"}}}, []string{"steps[0].script"}},
		{"script not a string", map[string]any{"steps": []any{map[string]any{"script": 3.0}}}, []string{"steps[0].script"}},
		{"step not an object", map[string]any{"steps": []any{"echo"}}, []string{"steps[0]"}},
		{"unknown fields", map[string]any{
			"steps": []any{map[string]any{"script": "true", "run": "x"}}, "shel": "sh",
		}, []string{"shel", "steps[0].run"}},
		{"bad destroy step", map[string]any{
			"steps":         []any{map[string]any{"script": "true"}},
			"destroy_steps": []any{map[string]any{"script": ""}},
		}, []string{"destroy_steps[0].script"}},
		{"empty shell", map[string]any{"steps": []any{map[string]any{"script": "true"}}, "shell": ""}, []string{"shell"}},
	}
	c := sdktest.Start(t, action.New())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Validate(t.Context(), tt.config)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			var got []string
			for _, d := range res.Diagnostics {
				if d.Message == "" {
					t.Errorf("diagnostic for %s has no message", d.Field)
				}
				got = append(got, d.Field)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("diagnostic fields = %q, want %q (%+v)", got, tt.want, res.Diagnostics)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	c := sdktest.Start(t, action.New())
	d, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != "action" || d.Protocol != sdk.Protocol || !d.Has(sdk.CapDestroy) || d.Has(sdk.CapDrift) || d.ConfigSchema == "" {
		t.Errorf("Describe = %+v", d)
	}
}

func TestApplyLinesInOrder(t *testing.T) {
	res, logs, _ := apply(t, steps(
		"first", "echo one; echo two; printf 'no newline'",
		"second", "echo three; echo oops >&2",
	), nil)
	if res.Error != "" || res.ExitCode != 0 {
		t.Fatalf("result = %+v", res)
	}
	if got, want := texts(logs, sdk.StreamStdout), []string{"one", "two", "no newline", "three"}; !slices.Equal(got, want) {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := texts(logs, sdk.StreamStderr), []string{"oops"}; !slices.Equal(got, want) {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	sys := texts(logs, sdk.StreamSystem)
	if len(sys) != 5 || !strings.HasPrefix(sys[0], "sandbox: ") {
		t.Errorf("first system line does not say how steps are sandboxed: %q", sys)
	}
	sys = sys[1:]
	if len(sys) != 4 || !strings.Contains(sys[0], "first: start") || !strings.Contains(sys[1], "exit code 0") ||
		!strings.Contains(sys[2], "second: start") {
		t.Errorf("system lines = %q", sys)
	}
	// The system line that ends a step comes after that step's output.
	var order []string
	for _, l := range logs {
		order = append(order, l.Text)
	}
	if i, j := slices.Index(order, "no newline"), slices.IndexFunc(order, func(s string) bool { return strings.Contains(s, "first: exit") }); i < 0 || j < i {
		t.Errorf("step end logged before its output: %q", order)
	}
}

// TestApplyStreamsBeforeStepEnds proves a line reaches the host while its
// step still runs: the step waits for a file the test creates only after
// it has seen the line.
func TestApplyStreamsBeforeStepEnds(t *testing.T) {
	dir := t.TempDir()
	c := sdktest.Start(t, action.New())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := c.Run(ctx, sdk.OpApply, &sdk.RunRequest{
		Job:    sdk.JobContext{WorkDir: dir},
		Config: steps("wait", "echo ready; while [ ! -e go ]; do sleep 0.01; done; echo done"),
	}, func(e sdk.LogEvent) {
		if e.Text == "ready" {
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("result = %+v", res)
	}
}

func TestApplyOutputs(t *testing.T) {
	res, _, dir := apply(t, steps(
		"a", `echo "url=https://a.example" >> "$BYOC_OUTPUTS"; echo "id=1" >> "$BYOC_OUTPUTS"`,
		"b", `printf '# comment\n\nid=2\nempty=\n' > "$BYOC_OUTPUTS"`,
	), nil)
	if res.Error != "" {
		t.Fatalf("result = %+v", res)
	}
	want := map[string]string{"url": "https://a.example", "id": "2", "empty": ""}
	if len(res.Outputs) != len(want) {
		t.Errorf("outputs = %v, want %v", res.Outputs, want)
	}
	for k, v := range want {
		if got, ok := res.Outputs[k]; !ok || got != v {
			t.Errorf("outputs[%s] = %q, want %q", k, got, v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "outputs-0.env")); err != nil {
		t.Errorf("outputs file not in work dir: %v", err)
	}
}

func TestApplyFailingStep(t *testing.T) {
	res, logs, dir := apply(t, steps(
		"ok", "echo fine",
		"broken", "echo before; exit 7; echo after",
		"never", "touch ran",
	), nil)
	if res.ExitCode != 7 {
		t.Errorf("exit code = %d, want 7", res.ExitCode)
	}
	if !strings.Contains(res.Error, `"broken"`) || !strings.Contains(res.Error, "7") {
		t.Errorf("error = %q, want it to name step broken and code 7", res.Error)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("step after the failure ran")
	}
	if slices.Contains(texts(logs, sdk.StreamStdout), "after") {
		t.Errorf("script went on after a failing command")
	}
}

func TestApplyShellErrexit(t *testing.T) {
	res, _, _ := apply(t, steps("e", "false; echo not reached"), nil)
	if res.ExitCode != 1 || res.Error == "" {
		t.Errorf("result = %+v, want exit 1 from sh -e", res)
	}
}

func TestApplyEnvIsExactlyTheRequestEnv(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "leak")
	res, logs, dir := apply(t, steps("env", "env"), map[string]string{"PATH": "/usr/bin:/bin", "GREETING": "hi there"})
	if res.Error != "" {
		t.Fatalf("result = %+v", res)
	}
	env := texts(logs, sdk.StreamStdout)
	for _, want := range []string{"GREETING=hi there", "BYOC_OUTPUTS=" + filepath.Join(dir, "outputs-0.env")} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %q: %q", want, env)
		}
	}
	for _, line := range env {
		if strings.HasPrefix(line, "AWS_") || strings.HasPrefix(line, "HOME=") {
			t.Errorf("env has inherited %q", line)
		}
	}
}

func TestApplySplitsLongLines(t *testing.T) {
	res, logs, _ := apply(t, steps("long", "head -c 150000 /dev/zero | tr '\\000' x; echo; echo short"), map[string]string{"PATH": "/usr/bin:/bin"})
	if res.Error != "" {
		t.Fatalf("result = %+v", res)
	}
	out := texts(logs, sdk.StreamStdout)
	var lens []int
	for _, l := range out {
		lens = append(lens, len(l))
	}
	want := []int{action.MaxLineBytes, action.MaxLineBytes, 150000 - 2*action.MaxLineBytes, len("short")}
	if !slices.Equal(lens, want) {
		t.Errorf("line lengths = %v, want %v", lens, want)
	}
}

func TestPlanDescribesSteps(t *testing.T) {
	dir := t.TempDir()
	c := sdktest.Start(t, action.New())
	res, _ := sdktest.Run(t, c, sdk.OpPlan, &sdk.RunRequest{
		Job: sdk.JobContext{WorkDir: dir}, Config: steps("build", "touch built"),
	})
	if res.Error != "" || !strings.Contains(res.Changes, "build: touch built") {
		t.Errorf("plan = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "built")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plan ran a step")
	}
}

func TestDestroy(t *testing.T) {
	tests := []struct {
		name     string
		config   map[string]any
		wantFile bool
	}{
		{"no destroy steps", steps("a", "touch applied"), false},
		{"destroy steps", map[string]any{
			"steps":         []any{map[string]any{"script": "true"}},
			"destroy_steps": []any{map[string]any{"name": "rm", "script": "touch destroyed"}},
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			c := sdktest.Start(t, action.New())
			res, _ := sdktest.Run(t, c, sdk.OpDestroy, &sdk.RunRequest{Job: sdk.JobContext{WorkDir: dir}, Config: tt.config})
			if res.Error != "" || res.ExitCode != 0 {
				t.Fatalf("result = %+v", res)
			}
			_, err := os.Stat(filepath.Join(dir, "destroyed"))
			if got := err == nil; got != tt.wantFile {
				t.Errorf("destroy step ran = %v, want %v", got, tt.wantFile)
			}
		})
	}
}

func TestInvalidConfigFailsApply(t *testing.T) {
	res, _, _ := apply(t, map[string]any{"steps": []any{}}, nil)
	if res.ExitCode == 0 || !strings.Contains(res.Error, "steps") {
		t.Errorf("result = %+v", res)
	}
}

// recorder is an sdk.Logger for calling the plugin directly.
type recorder struct {
	mu    sync.Mutex
	lines []string
	seen  chan string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.lines = append(r.lines, s)
	r.mu.Unlock()
	select {
	case r.seen <- s:
	default:
	}
}
func (r *recorder) Stdout(s string) { r.add(s) }
func (r *recorder) Stderr(s string) { r.add(s) }
func (r *recorder) System(s string) { r.add(s) }

func TestCancelStopsStep(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rec := &recorder{seen: make(chan string, 16)}
	done := make(chan error, 1)
	go func() {
		_, err := action.New().Apply(ctx, &sdk.ApplyRequest{
			Job: sdk.JobContext{WorkDir: t.TempDir()}, Config: steps("hang", "echo started; exec sleep 300"), Log: rec,
		})
		done <- err
	}()
	deadline := time.After(10 * time.Second)
	for started := false; !started; {
		select {
		case s := <-rec.seen:
			started = s == "started"
		case <-deadline:
			t.Fatal("step did not start")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Apply error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Apply did not return after cancel")
	}
}

// TestHarness drives the action type through sdktest the way the agent
// runs its jobs: validate, then plan, apply and destroy, each in a fresh
// work dir.
func TestHarness(t *testing.T) {
	cfg := map[string]any{
		"steps":         []any{map[string]any{"name": "hello", "script": `echo "hello $WHO"; echo greeting=hi >"$BYOC_OUTPUTS"`}},
		"destroy_steps": []any{map[string]any{"script": `echo destroyed=yes >"$BYOC_OUTPUTS"`}},
	}
	sdktest.Test(t, action.New(), sdktest.Case{
		Env: map[string]string{"WHO": "operator"},
		Steps: []sdktest.Step{
			{Config: map[string]any{"steps": []any{map[string]any{"scrpt": "x"}}},
				ExpectDiagnostics: []string{"steps[0].script: is required", "steps[0].scrpt: unknown field"}},
			{Op: sdk.OpPlan, Config: cfg, Check: sdktest.All(sdktest.ExpectChanges("would run 1 step(s)"), sdktest.ExpectNoLog("hello operator"))},
			{Config: cfg, Check: sdktest.All(sdktest.ExpectLog("hello operator"), sdktest.ExpectOutput("greeting", "hi"))},
			{Config: steps("fail", "exit 7"), ExpectError: regexp.MustCompile(`step "fail" failed with exit code 7`), Check: sdktest.ExpectExitCode(7)},
		},
		CheckDestroy: sdktest.ExpectOutput("destroyed", "yes"),
	})
}
