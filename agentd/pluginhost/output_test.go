package pluginhost_test

import (
	"context"
	"github.com/byoc-dev/byoc/internal/syncbuf"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// outputLines collects what a plugin prints outside the protocol.
type outputLines struct {
	mu    sync.Mutex
	lines []string
}

func (o *outputLines) add(source, text string) {
	o.mu.Lock()
	o.lines = append(o.lines, source+": "+text)
	o.mu.Unlock()
}

func (o *outputLines) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.lines)
}

func startTestkit(t *testing.T, env map[string]string, out *outputLines) (*pluginhost.Instance, error) {
	t.Helper()
	return startTestkitLog(t, env, out, testLogger())
}

func startTestkitLog(t *testing.T, env map[string]string, out *outputLines, logger *slog.Logger) (*pluginhost.Instance, error) {
	t.Helper()
	dir, sum := install(t, testkit(t), "testkit")
	l := newLoader(t)
	l.Logger = logger
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
	inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir(), Env: env, Output: out.add})
	if err == nil {
		t.Cleanup(inst.Kill)
	}
	return inst, err
}

// What plugin code prints to stdout and stderr, by fmt or the log package,
// reaches the host by the time the operation's result does, and nothing
// of go-plugin's own logging or of the SDK's sync lines does. The agent's
// debug log has it too.
func TestPluginOutputIsCaptured(t *testing.T) {
	var out outputLines
	var debug syncbuf.Buffer
	inst, err := startTestkitLog(t, nil, &out, slog.New(slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := run(t, inst, t.TempDir(), map[string]any{"mode": "print"}, nil)
	if res.Error != "" {
		t.Fatalf("result = %+v", res)
	}
	got := out.get()
	for _, want := range []string{"stdout: debug via fmt.Println", "stderr: debug via os.Stderr"} {
		if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("output lacks %q before the result came back: %q", want, got)
		}
	}
	// The log package writes to the stderr the plugin started with, not
	// to go-plugin's redirected stream that carries the sync lines: its
	// output is captured too, but may trail the result on a busy machine.
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(out.get(), func(l string) bool { return strings.Contains(l, "debug via the log package") }) {
		if time.Now().After(deadline) {
			t.Fatalf("output lacks the log package's line: %q", out.get())
		}
		time.Sleep(10 * time.Millisecond)
	}
	inst.Kill()
	got = out.get()
	if !slices.Contains(got, "stdout: no newline at the end") {
		t.Errorf("the last line without a newline is missing after Kill: %q", got)
	}
	for _, l := range got {
		if strings.Contains(l, "@message") || strings.Contains(l, "byoc-stdio-sync") {
			t.Errorf("plumbing in the output: %q", l)
		}
	}
	for _, want := range []string{"debug via fmt.Println", "debug via os.Stderr", "debug via the log package"} {
		if !strings.Contains(debug.String(), want) {
			t.Errorf("the debug log lacks %q:\n%s", want, debug.String())
		}
	}
}

// A panic in an operation is an error whose stack trace is in the log; a
// panic in a goroutine kills the plugin, and the runtime's report with
// every goroutine's stack is in the output by the time Run returns.
func TestPluginPanics(t *testing.T) {
	var out outputLines
	inst, err := startTestkit(t, nil, &out)
	if err != nil {
		t.Fatal(err)
	}
	res, logs := run(t, inst, t.TempDir(), map[string]any{"mode": "panic"}, nil)
	var log []string
	for _, e := range logs {
		log = append(log, e.Text)
	}
	all := strings.Join(log, "\n")
	if !strings.Contains(res.Error, "plugin panic: assignment to entry in nil map") ||
		!strings.Contains(all, "goroutine ") || !strings.Contains(all, "testkit/main.go:") {
		t.Errorf("panic in Apply: result %+v, log:\n%s", res, all)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{WorkDir: t.TempDir()}, Config: map[string]any{"mode": "goroutine-panic"}}, func(sdk.LogEvent) {})
	if err == nil || !strings.Contains(err.Error(), "plugin testkit exited during apply: exit status 2") {
		t.Fatalf("Run error = %v", err)
	}
	got := strings.Join(out.get(), "\n")
	for _, want := range []string{"stderr: panic: boom in a goroutine", "stderr: goroutine ", "testkit/main.go:"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// A plugin that prints to stdout before serving is told so, not sent to
// check its architecture and libraries.
func TestStrayStdoutBeforeServe(t *testing.T) {
	var out outputLines
	_, err := startTestkit(t, map[string]string{"TESTKIT_STRAY_STDOUT": "starting up!"}, &out)
	if err == nil {
		t.Fatal("Start succeeded")
	}
	want := `the plugin printed "starting up!" on stdout before serving, where go-plugin expects its handshake line: a plugin must not print to stdout before sdk.Serve`
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "architecture") {
		t.Errorf("Start error = %q, want %q", err, want)
	}
}

// An unknown type's error says where the agent looked and for what file.
func TestUnknownTypeNamesDirsAndFile(t *testing.T) {
	l := newLoader(t)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	l.Dirs = []string{a, b}
	_, err := l.Start(t.Context(), "kvfile", pluginhost.StartOptions{WorkDir: t.TempDir()})
	want := `unknown component type "kvfile": it is not built in and no plugin file byoc-plugin-kvfile was found (plugin dirs searched: ` + a + ", " + b + "); known types: action"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Start error = %v, want %q", err, want)
	}
}

// BenchmarkJobCalls measures a built-in plugin's Validate and a one-step
// apply (the calls after which the host waits for the plugin's sync
// lines), without launch and kill. Run with -benchtime 50x.
func BenchmarkJobCalls(b *testing.B) {
	inst, dir := start(b, newLoader(b), "action", nil)
	cfg := script("true")
	b.ResetTimer()
	for range b.N {
		if _, err := inst.Validate(b.Context(), cfg); err != nil {
			b.Fatal(err)
		}
		if res, _ := run(b, inst, dir, cfg, nil); res.Error != "" {
			b.Fatal(res.Error)
		}
	}
}
