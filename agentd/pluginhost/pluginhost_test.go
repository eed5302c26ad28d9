package pluginhost_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
	"github.com/byoc-dev/byoc/plugins/action"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// builtins are the types the test binary serves when re-executed, the way
// the agent binary does.
var builtins = map[string]sdk.Plugin{"action": action.New()}

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "plugin" && os.Args[2] == "rogue" {
		rogue()
	}
	if len(os.Args) > 2 && os.Args[1] == "plugin" {
		p, ok := builtins[os.Args[2]]
		if !ok {
			fmt.Fprintf(os.Stderr, "no built-in type %q\n", os.Args[2])
			os.Exit(2)
		}
		// As agentd's own plugin binaries do (Loader.OwnRelay).
		if err := sandbox.StartRelayFromEnv(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(125)
		}
		sdk.ServeArgs(p, os.Args[3:])
	}
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitArg {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "hold-plugin" {
		holdPlugin()
	}
	if len(os.Args) > 2 && os.Args[1] == "own-group" {
		ownGroup(os.Args[2])
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if testkitDir != "" {
			os.RemoveAll(testkitDir)
		}
		os.Exit(code)
	}))
}

var (
	testkitOnce sync.Once
	testkitDir  string
	testkitBin  string
	testkitErr  error
)

// testkit builds the external test plugin once per test binary.
func testkit(tb testing.TB) string {
	tb.Helper()
	testkitOnce.Do(func() {
		testkitDir, testkitErr = os.MkdirTemp("", "pluginhost-testkit-")
		if testkitErr != nil {
			return
		}
		testkitBin = filepath.Join(testkitDir, "testkit")
		out, err := exec.Command("go", "build", "-o", testkitBin, "./testdata/testkit").CombinedOutput()
		if err != nil {
			testkitErr = fmt.Errorf("go build testkit: %v\n%s", err, out)
		}
	})
	if testkitErr != nil {
		tb.Fatal(testkitErr)
	}
	return testkitBin
}

// install copies bin into a fresh plugin dir as the plugin for typ and
// returns the dir and the binary's sha256.
func install(tb testing.TB, bin, typ string) (dir, sum string) {
	tb.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		tb.Fatal(err)
	}
	dir = filepath.Join(tb.TempDir(), "plugins")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pluginhost.BinaryPrefix+typ), b, 0o755); err != nil {
		tb.Fatal(err)
	}
	h := sha256.Sum256(b)
	return dir, hex.EncodeToString(h[:])
}

func testLogger() *slog.Logger {
	if os.Getenv("BYOC_TEST_PLUGIN_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newLoader(tb testing.TB) *pluginhost.Loader {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return &pluginhost.Loader{
		SelfExe:  self,
		SelfArgs: func(typ string) []string { return []string{"plugin", typ} },
		Builtins: []string{"action"},
		Logger:   testLogger(),
		Sandbox:  testSandbox(tb, os.Getenv("BYOC_TEST_SANDBOX")),
		// BYOC_TEST_SANDBOX_NETWORK=host|none|proxy (default proxy)
		// measures the launch cost of the sandbox's network.
		Egress:   &pluginhost.Egress{Network: pluginhost.Network(os.Getenv("BYOC_TEST_SANDBOX_NETWORK"))},
		OwnRelay: true, // as agentd
	}
}

// testSandbox is the sandbox of mode (bubblewrap or namespaces), or nil
// for "": BYOC_TEST_SANDBOX=MODE runs every test of the package in it.
func testSandbox(tb testing.TB, mode string) *pluginhost.Sandbox {
	tb.Helper()
	if mode == "" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := pluginhost.ProbeSandbox(context.Background(), pluginhost.SandboxOptions{Mode: mode, InitExe: self})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func start(tb testing.TB, l *pluginhost.Loader, typ string, env map[string]string) (*pluginhost.Instance, string) {
	tb.Helper()
	dir := tb.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inst, err := l.Start(ctx, typ, pluginhost.StartOptions{WorkDir: dir, Env: env})
	if err != nil {
		tb.Fatalf("Start(%s): %v", typ, err)
	}
	tb.Cleanup(inst.Kill)
	return inst, dir
}

func script(s string) map[string]any {
	return map[string]any{"steps": []any{map[string]any{"name": "s", "script": s}}}
}

func stdout(logs []sdk.LogEvent) []string {
	var out []string
	for _, l := range logs {
		if l.Stream == sdk.StreamStdout {
			out = append(out, l.Text)
		}
	}
	return out
}

func run(tb testing.TB, inst *pluginhost.Instance, dir string, cfg map[string]any, env map[string]string) (*sdk.Result, []sdk.LogEvent) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs []sdk.LogEvent
	res, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j", WorkDir: dir}, Config: cfg, Env: env},
		func(e sdk.LogEvent) { logs = append(logs, e) })
	if err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return res, logs
}

func TestBuiltin(t *testing.T) {
	inst, dir := start(t, newLoader(t), "action", nil)
	d, err := inst.Describe(t.Context())
	if err != nil || d.Type != "action" {
		t.Fatalf("Describe = %+v, %v", d, err)
	}
	v, err := inst.Validate(t.Context(), map[string]any{"steps": []any{map[string]any{"script": ""}}})
	if err != nil || len(v.Diagnostics) != 1 || v.Diagnostics[0].Field != "steps[0].script" {
		t.Fatalf("Validate = %+v, %v", v, err)
	}
	res, logs := run(t, inst, dir, script(`echo one; echo two; echo "k=v" > "$BYOC_OUTPUTS"`), nil)
	if res.Error != "" || res.Outputs["k"] != "v" {
		t.Errorf("result = %+v", res)
	}
	if got := stdout(logs); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("stdout = %q", got)
	}
	if inst.PGID() <= 0 {
		t.Errorf("PGID = %d", inst.PGID())
	}
}

func TestExternal(t *testing.T) {
	bin := testkit(t)
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir, sum string) map[string]string // returns pins
		typ     string
		wantErr string
		env     map[string]string
	}{
		{"pinned", func(t *testing.T, dir, sum string) map[string]string {
			return map[string]string{"testkit": strings.ToUpper(sum)}
		}, "testkit", "", nil},
		{"not pinned", func(t *testing.T, dir, sum string) map[string]string {
			return map[string]string{"other": sum}
		}, "testkit", "plugin testkit is not pinned", nil},
		{"wrong checksum", func(t *testing.T, dir, sum string) map[string]string {
			return map[string]string{"testkit": strings.Repeat("ab", 32)}
		}, "testkit", "checksum mismatch: pinned " + strings.Repeat("ab", 32) + ", found ", nil},
		{"world-writable dir", func(t *testing.T, dir, sum string) map[string]string {
			chmod(t, dir, 0o777)
			return map[string]string{"testkit": sum}
		}, "testkit", "is writable by group or others", nil},
		{"group-writable binary", func(t *testing.T, dir, sum string) map[string]string {
			chmod(t, filepath.Join(dir, "byoc-plugin-testkit"), 0o775)
			return map[string]string{"testkit": sum}
		}, "testkit", "is writable by group or others", nil},
		{"unknown type", func(t *testing.T, dir, sum string) map[string]string {
			return map[string]string{"testkit": sum}
		}, "nope", `unknown component type "nope": it is not built in and no plugin file byoc-plugin-nope was found (plugin dirs searched: `, nil},
		{"path in type", func(t *testing.T, dir, sum string) map[string]string {
			return nil
		}, "../testkit", "invalid component type", nil},
		{"parent writable by others", func(t *testing.T, dir, sum string) map[string]string {
			chmod(t, filepath.Dir(dir), 0o777)
			return map[string]string{"testkit": sum}
		}, "testkit", "which is writable by others without the sticky bit", nil},
		{"dir owned by another user", func(t *testing.T, dir, sum string) map[string]string {
			chown(t, dir, 65534)
			return map[string]string{"testkit": sum}
		}, "testkit", "is owned by uid 65534, neither root nor the agent's user", nil},
		{"binary owned by another user", func(t *testing.T, dir, sum string) map[string]string {
			chown(t, filepath.Join(dir, "byoc-plugin-testkit"), 65534)
			return map[string]string{"testkit": sum}
		}, "testkit", "is owned by uid 65534", nil},
		{"plugin for another type", func(t *testing.T, dir, sum string) map[string]string {
			b, err := os.ReadFile(filepath.Join(dir, "byoc-plugin-testkit"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "byoc-plugin-other"), b, 0o755); err != nil {
				t.Fatal(err)
			}
			return map[string]string{"other": sum}
		}, "other", `plugin says it serves type "testkit", not "other"`, nil},
		{"incompatible protocol", func(t *testing.T, dir, sum string) map[string]string {
			return map[string]string{"testkit": sum}
		}, "testkit", `plugin "testkit" speaks byoc plugin protocol 2.x, but this agent speaks ` + sdk.Protocol.String(),
			map[string]string{"TESTKIT_PROTOCOL_MAJOR": "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, sum := install(t, bin, "testkit")
			l := newLoader(t)
			l.Dirs = []string{filepath.Join(t.TempDir(), "missing"), dir}
			l.Pins = tt.setup(t, dir, sum)
			inst, err := l.Start(t.Context(), tt.typ, pluginhost.StartOptions{WorkDir: t.TempDir(), Env: tt.env})
			if tt.wantErr != "" {
				if err == nil {
					inst.Kill()
					t.Fatalf("Start succeeded, want error %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Start error = %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(inst.Kill)
			res, logs := run(t, inst, t.TempDir(), map[string]any{"mode": "ok"}, nil)
			if res.Error != "" || res.Outputs["mode"] != "ok" || !slices.Contains(stdout(logs), "hello from testkit") {
				t.Errorf("result = %+v, logs = %+v", res, logs)
			}
		})
	}
}

func chown(tb testing.TB, path string, uid int) {
	tb.Helper()
	if os.Getuid() != 0 {
		tb.Skip("changing a file's owner needs root")
	}
	if err := os.Chown(path, uid, uid); err != nil {
		tb.Fatal(err)
	}
}

func chmod(tb testing.TB, path string, mode os.FileMode) {
	tb.Helper()
	if err := os.Chmod(path, mode); err != nil {
		tb.Fatal(err)
	}
}

// TestEnvIsClean checks that nothing of the agent's environment reaches a
// plugin or its scripts.
func TestEnvIsClean(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "leak")
	bin := testkit(t)
	dir, sum := install(t, bin, "testkit")
	l := newLoader(t)
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}

	checkEnv := func(t *testing.T, env []string, workDir string) {
		t.Helper()
		for _, want := range []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + workDir, "TMPDIR=" + workDir, "LANG=C.UTF-8", "JOB_VAR=set"} {
			if !slices.Contains(env, want) {
				t.Errorf("plugin env lacks %q: %q", want, env)
			}
		}
		for _, kv := range env {
			if strings.Contains(kv, "leak") || strings.HasPrefix(kv, "AWS_") {
				t.Errorf("plugin env has %q", kv)
			}
		}
	}

	t.Run("builtin process", func(t *testing.T) {
		inst, workDir := start(t, l, "action", map[string]string{"JOB_VAR": "set"})
		b, err := os.ReadFile("/proc/" + strconv.Itoa(inst.PGID()) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		checkEnv(t, strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), workDir)
	})
	t.Run("builtin script", func(t *testing.T) {
		inst, workDir := start(t, l, "action", nil)
		_, logs := run(t, inst, workDir, script("env"), map[string]string{"ONLY": "this"})
		env := stdout(logs)
		if !slices.Contains(env, "ONLY=this") {
			t.Errorf("script env lacks the request env: %q", env)
		}
		for _, kv := range env {
			if strings.Contains(kv, "leak") {
				t.Errorf("script env has %q", kv)
			}
		}
	})
	t.Run("external process", func(t *testing.T) {
		inst, workDir := start(t, l, "testkit", map[string]string{"JOB_VAR": "set"})
		_, logs := run(t, inst, workDir, map[string]any{"mode": "env"}, nil)
		checkEnv(t, stdout(logs), workDir)
	})
}

// groupPIDs lists the live processes of process group pgid.
func groupPIDs(tb testing.TB, pgid int) []int {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, pg, ok := stat(pid); ok && pg == pgid && state != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

func stat(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	pg, _ := strconv.Atoi(string(f[2]))
	return f[0][0], pg, true
}

// dead reports whether pid is gone or a zombie.
func dead(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	state, _, ok := stat(pid)
	return !ok || state == 'Z'
}

// assertGone fails unless every pid is dead within timeout.
func assertGone(tb testing.TB, pids []int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for !dead(pid) {
			if time.Now().After(deadline) {
				tb.Errorf("pid %d still alive", pid)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	inst, dir := start(t, newLoader(t), "action", nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var pids []int
	began := time.Now()
	_, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{
		Job:    sdk.JobContext{WorkDir: dir},
		Config: script("sleep 300 & sleep 300 & echo started; wait"),
		Env:    map[string]string{"PATH": "/usr/bin:/bin"},
	}, func(e sdk.LogEvent) {
		if e.Text != "started" {
			return
		}
		// plugin, sh and two sleeps; the sleeps may still be forking.
		deadline := time.Now().Add(5 * time.Second)
		for pids = groupPIDs(t, inst.PGID()); len(pids) < 4 && time.Now().Before(deadline); pids = groupPIDs(t, inst.PGID()) {
			time.Sleep(time.Millisecond)
		}
		began = time.Now()
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled", err)
	}
	if len(pids) < 4 {
		t.Fatalf("process group had %d live processes, want at least 4: %v", len(pids), pids)
	}
	if !slices.Contains(pids, inst.PGID()) {
		t.Errorf("plugin %d not in its own group %v", inst.PGID(), pids)
	}
	// Run kills before it returns, so everything must be dead already.
	assertGone(t, pids, 0)
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("cancel took %v", d)
	}
	if !errors.Is(syscall.Kill(-inst.PGID(), 0), syscall.ESRCH) && len(groupPIDs(t, inst.PGID())) > 0 {
		t.Errorf("process group %d still has live members", inst.PGID())
	}
}

func TestCrashMidApply(t *testing.T) {
	bin := testkit(t)
	dir, sum := install(t, bin, "testkit")
	l := newLoader(t)
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
	tests := []struct {
		name   string
		typ    string
		config map[string]any
		want   string
		// A line sent right before the plugin dies may never leave it.
		wantLogs bool
		// killOn, if set, SIGKILLs the plugin when this line arrives: a
		// step cannot do it itself, it sees no process outside its sandbox.
		killOn string
	}{
		{"plugin killed mid-apply", "action", script("echo bye; sleep 300"), "plugin action exited during apply: signal: killed", true, "bye"},
		{"plugin exits", "testkit", map[string]any{"mode": "crash"}, "plugin testkit exited during apply: exit status 3", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, workDir := start(t, l, tt.typ, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var logs []string
			res, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{WorkDir: workDir}, Config: tt.config, Env: map[string]string{"PATH": "/usr/bin:/bin"}},
				func(e sdk.LogEvent) {
					logs = append(logs, e.Text)
					if tt.killOn != "" && e.Text == tt.killOn {
						_ = syscall.Kill(inst.PGID(), syscall.SIGKILL)
					}
				})
			if err == nil {
				t.Fatalf("Run = %+v, want an error", res)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run error = %q, want %q", err, tt.want)
			}
			if ctx.Err() != nil {
				t.Errorf("crash was only noticed at the deadline")
			}
			if tt.wantLogs && len(logs) == 0 {
				t.Errorf("no log lines before the crash")
			}
			assertGone(t, groupPIDs(t, inst.PGID()), 0)
		})
	}
}

func TestDeadlineKillsHungPlugin(t *testing.T) {
	bin := testkit(t)
	dir, sum := install(t, bin, "testkit")
	l := newLoader(t)
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
	tests := []struct {
		name   string
		typ    string
		config map[string]any
	}{
		{"plugin ignores ctx", "testkit", map[string]any{"mode": "hang"}},
		{"script hangs", "action", script("sleep 300")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, workDir := start(t, l, tt.typ, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			began := time.Now()
			_, err := inst.Run(ctx, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{WorkDir: workDir}, Config: tt.config, Env: map[string]string{"PATH": "/usr/bin:/bin"}}, nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run error = %v, want context.DeadlineExceeded", err)
			}
			if d := time.Since(began); d > 3*time.Second {
				t.Errorf("Run returned after %v", d)
			}
			if !dead(inst.PGID()) {
				t.Errorf("plugin %d still alive", inst.PGID())
			}
			assertGone(t, groupPIDs(t, inst.PGID()), 0)
		})
	}
}

// A step runs in its own PID namespace: its parent there is the sandbox's
// init, and the plugin is out of its reach.
func TestStepCannotKillItsPlugin(t *testing.T) {
	l := newLoader(t)
	inst, workDir := start(t, l, "action", nil)
	res, logs := run(t, inst, workDir, script("kill -9 $PPID 2>/dev/null; echo survived"), map[string]string{"PATH": "/usr/bin:/bin"})
	if res.Error != "" || !slices.Contains(stdout(logs), "survived") {
		t.Errorf("result = %+v, logs = %q", res, stdout(logs))
	}
	if !groupAlive(inst.PGID()) {
		t.Errorf("the plugin died")
	}
}

func groupAlive(pgid int) bool { return syscall.Kill(pgid, 0) == nil }

func TestKillIsIdempotent(t *testing.T) {
	inst, _ := start(t, newLoader(t), "action", nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(inst.Kill)
	}
	wg.Wait()
	inst.Kill()
	if !dead(inst.PGID()) {
		t.Errorf("plugin %d still alive", inst.PGID())
	}
	if _, err := inst.Describe(t.Context()); err == nil {
		t.Errorf("Describe after Kill succeeded")
	}
}

func TestStartErrors(t *testing.T) {
	tests := []struct {
		name    string
		loader  func(*pluginhost.Loader)
		opt     pluginhost.StartOptions
		wantErr string
	}{
		{"no work dir", nil, pluginhost.StartOptions{}, "work dir is required"},
		{"self exe is not a plugin", func(l *pluginhost.Loader) { l.SelfExe = "/bin/true" }, pluginhost.StartOptions{WorkDir: os.TempDir()}, "start plugin action"},
		{"unknown type without dirs", func(l *pluginhost.Loader) { l.Builtins = []string{"action", "other"} }, pluginhost.StartOptions{WorkDir: os.TempDir()}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLoader(t)
			if tt.loader != nil {
				tt.loader(l)
			}
			typ := "action"
			want := tt.wantErr
			if want == "" {
				typ, want = "missing", `unknown component type "missing": it is not built in and no plugin file byoc-plugin-missing was found (no plugin dirs are configured (agentd --plugin-dir)); known types: action, other`
			}
			inst, err := l.Start(t.Context(), typ, tt.opt)
			if err == nil {
				inst.Kill()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Start error = %q, want %q", err, want)
			}
		})
	}
}

// BenchmarkLaunch measures a built-in plugin's whole life for one job:
// start, handshake, one Describe, Kill. Run with -benchtime 50x.
func BenchmarkLaunch(b *testing.B) {
	l := newLoader(b)
	dir := b.TempDir()
	ctx := b.Context()
	total := make([]time.Duration, 0, b.N)
	kill := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		// Start returns once the plugin has answered its first call, the
		// protocol negotiation.
		inst, err := l.Start(ctx, "action", pluginhost.StartOptions{WorkDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if inst.Description().Negotiated != sdk.Protocol {
			b.Fatalf("negotiated %s", inst.Description().Negotiated)
		}
		killed := time.Now()
		inst.Kill()
		total = append(total, time.Since(began))
		kill = append(kill, time.Since(killed))
	}
	b.StopTimer()
	b.ReportMetric(percentile(total, 0.50), "p50-ms")
	b.ReportMetric(percentile(total, 0.99), "p99-ms")
	b.ReportMetric(percentile(kill, 0.50), "kill-p50-ms")
}

// percentile returns the p-th percentile of ds in milliseconds.
func percentile(ds []time.Duration, p float64) float64 {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := min(int(float64(len(ds))*p), len(ds)-1)
	return float64(ds[i].Microseconds()) / 1000
}

func TestDescribeCommand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cmd  []string
		want string
	}{
		{"builtin", []string{self, "plugin", "action", "describe"}, "action"},
		{"external", []string{testkit(t), "describe"}, "testkit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.CommandContext(t.Context(), tt.cmd[0], tt.cmd[1:]...).Output()
			if err != nil {
				t.Fatalf("%v: %v", tt.cmd, err)
			}
			var d struct {
				Type             string   `json:"type"`
				Protocol         string   `json:"protocol"`
				ProtocolVersions []string `json:"protocol_versions"`
			}
			want := sdk.Protocol.String()
			if err := json.Unmarshal(out, &d); err != nil || d.Type != tt.want || d.Protocol != want || !slices.Contains(d.ProtocolVersions, want) {
				t.Errorf("describe = %s (%v)", out, err)
			}
		})
	}
}

// BenchmarkLaunchExternal is BenchmarkLaunch for a pinned third-party
// plugin: it adds checking the binary (hash, modes, owners) and AutoMTLS.
func BenchmarkLaunchExternal(b *testing.B) {
	dir, sum := install(b, testkit(b), "testkit")
	l := newLoader(b)
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
	work := b.TempDir()
	total := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		began := time.Now()
		inst, err := l.Start(b.Context(), "testkit", pluginhost.StartOptions{WorkDir: work})
		if err != nil {
			b.Fatal(err)
		}
		total = append(total, time.Since(began))
		inst.Kill()
	}
	b.StopTimer()
	b.ReportMetric(percentile(total, 0.50), "p50-ms")
	b.ReportMetric(percentile(total, 0.99), "p99-ms")
}

// The loader keeps a verified plugin's checksum, but a changed binary is
// hashed again and refused.
func TestChangedPluginIsRefused(t *testing.T) {
	dir, sum := install(t, testkit(t), "testkit")
	l := newLoader(t)
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
	inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	inst.Kill()
	// Same size, same mtime: only the content and the ctime change.
	path := filepath.Join(dir, "byoc-plugin-testkit")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, fi.Size()-1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()}); err == nil {
		inst.Kill()
		t.Fatal("a changed plugin started")
	} else if !strings.Contains(err.Error(), "checksum mismatch: pinned "+sum) {
		t.Fatalf("error = %v", err)
	}
}

// installBundled copies bin into a fresh directory as the companion
// binary byoc-plugins and returns its path.
func installBundled(tb testing.TB, bin string) string {
	tb.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Join(tb.TempDir(), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "byoc-plugins")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestBundled runs a bundled type through the companion binary (the
// testkit plugin standing in for byoc-plugins): a real subprocess, started
// as "byoc-plugins TYPE" without a pin, and checked like an external
// plugin before it runs.
func TestBundled(t *testing.T) {
	bin := testkit(t)
	const hint = "install it next to agentd or set agentd --bundled-plugins PATH"
	tests := []struct {
		name    string
		setup   func(t *testing.T, exe string) string // returns BundledExe
		wantErr string
	}{
		{"runs without a pin", func(t *testing.T, exe string) string { return exe }, ""},
		{"missing", func(t *testing.T, exe string) string {
			return filepath.Join(t.TempDir(), "byoc-plugins")
		}, "the testkit type is bundled in byoc-plugins, which was not found at " /* path */},
		{"group-writable", func(t *testing.T, exe string) string {
			chmod(t, exe, 0o775)
			return exe
		}, "the testkit type is bundled in byoc-plugins: plugin %s is writable by group or others (mode -rwxrwxr-x); refusing to run it"},
		{"not executable", func(t *testing.T, exe string) string {
			chmod(t, exe, 0o644)
			return exe
		}, "plugin %s is not executable"},
		{"a directory", func(t *testing.T, exe string) string {
			os.Remove(exe)
			if err := os.Mkdir(exe, 0o755); err != nil {
				t.Fatal(err)
			}
			return exe
		}, "plugin %s is not a regular file"},
		{"world-writable dir", func(t *testing.T, exe string) string {
			chmod(t, filepath.Dir(exe), 0o777)
			return exe
		}, "is writable by group or others (mode -rwxrwxrwx); refusing to run plugins from it"},
		{"owned by another user", func(t *testing.T, exe string) string {
			chown(t, exe, 65534)
			return exe
		}, "is owned by uid 65534, neither root nor the agent's user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exe := tt.setup(t, installBundled(t, bin))
			l := newLoader(t)
			l.Bundled, l.BundledExe, l.BundledHint = []string{"testkit"}, exe, hint
			if k := l.KnownTypes(); !slices.Equal(k, []string{"action", "testkit"}) {
				t.Errorf("KnownTypes = %q", k)
			}
			inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()})
			if tt.wantErr != "" {
				if err == nil {
					inst.Kill()
					t.Fatalf("Start succeeded, want error %q", tt.wantErr)
				}
				want := tt.wantErr
				if strings.Contains(want, "%s") {
					want = fmt.Sprintf(want, exe)
				}
				if tt.name == "missing" {
					want += exe + "; " + hint
				}
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("Start error = %q, want it to contain %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(inst.Kill)
			// The companion runs as "byoc-plugins TYPE", from the file
			// that was checked (through its descriptor, so argv[0] names it).
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", inst.PGID()))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); l.Sandbox == nil && !slices.Equal(got, []string{exe, "testkit"}) {
				t.Errorf("the companion's argv = %q, want [%s testkit]", got, exe)
			}
			res, logs := run(t, inst, t.TempDir(), map[string]any{"mode": "ok"}, nil)
			if res.Error != "" || res.Outputs["mode"] != "ok" || !slices.Contains(stdout(logs), "hello from testkit") {
				t.Errorf("result = %+v, logs = %+v", res, logs)
			}
		})
	}
}

// A bundled type is not looked for in the plugin dirs: a byoc-plugin-TYPE
// there does not stand in for a missing companion.
func TestBundledIsNotSearchedInPluginDirs(t *testing.T) {
	dir, sum := install(t, testkit(t), "testkit")
	l := newLoader(t)
	l.Dirs, l.Pins = []string{dir}, map[string]string{"testkit": sum}
	l.Bundled, l.BundledExe = []string{"testkit"}, filepath.Join(t.TempDir(), "byoc-plugins")
	inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()})
	if err == nil {
		inst.Kill()
		t.Fatal("Start succeeded without the companion")
	}
	if !strings.Contains(err.Error(), "which was not found at "+l.BundledExe) {
		t.Fatalf("error = %v", err)
	}
}

// The customer's pin file is read again when it changes, so pinning,
// re-pinning and unpinning need no restart, and each change is reported
// (the agent records it in its journal). The errors say which command
// pins what (issue 29: "checksum mismatch" named no flag).
func TestPinFileReloaded(t *testing.T) {
	dir, sum := install(t, testkit(t), "testkit")
	pinPath := filepath.Join(t.TempDir(), pluginhost.PinFileName)
	var changes []pluginhost.PinChange
	l := newLoader(t)
	l.Dirs = []string{dir}
	l.PinWatcher = &pluginhost.PinWatcher{Path: pinPath, OnChange: func(c []pluginhost.PinChange) { changes = append(changes, c...) }}
	start := func() error {
		inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()})
		if err == nil {
			inst.Kill()
		}
		return err
	}
	wantCmd := "agentd plugin pin testkit " + sum
	if err := start(); err == nil || !strings.Contains(err.Error(), "is not pinned") || !strings.Contains(err.Error(), wantCmd) {
		t.Fatalf("unpinned: %v, want it to name %q", err, wantCmd)
	}
	other := strings.Repeat("ab", 32)
	write := func(pins map[string]pluginhost.Pin) {
		t.Helper()
		if err := pluginhost.WritePins(pinPath, pluginhost.PinFile{Pins: pins}); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]pluginhost.Pin{"testkit": {SHA256: other, PinnedBy: "ops"}})
	if err := start(); err == nil || !strings.Contains(err.Error(), "checksum mismatch: pinned "+other) || !strings.Contains(err.Error(), "re-pin it: "+wantCmd) {
		t.Fatalf("mismatch: %v, want it to name %q", err, wantCmd)
	}
	write(map[string]pluginhost.Pin{"testkit": {SHA256: sum, PinnedBy: "ops"}})
	if err := start(); err != nil {
		t.Fatalf("re-pinned: %v", err)
	}
	write(map[string]pluginhost.Pin{})
	if err := start(); err == nil || !strings.Contains(err.Error(), "is not pinned") {
		t.Fatalf("unpinned again: %v", err)
	}
	want := []pluginhost.PinChange{{Type: "testkit", New: other, By: "ops"}, {Type: "testkit", Old: other, New: sum, By: "ops"}, {Type: "testkit", Old: sum}}
	if !slices.Equal(changes, want) {
		t.Errorf("changes = %+v, want %+v", changes, want)
	}
	if err := os.WriteFile(pinPath, []byte(`{"pins": {"testkit": {"sha256": "nope"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := start(); err == nil || !strings.Contains(err.Error(), "pins.testkit: sha256 \"nope\": want 64 lowercase hex digits") {
		t.Fatalf("malformed pin file: %v", err)
	}
}

// A plugin served in debug mode, started outside the agent (as under
// delve), is used by the loader through Loader.Reattach: jobs call it
// over its socket, no pin needed, and it keeps running after each job
// until its developer stops it (issue 29 item 3).
func TestReattachToPluginInDebugMode(t *testing.T) {
	cmd := exec.Command(testkit(t), "debug")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var value string
	for value == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the plugin printed no %s line; stderr: %s", sdk.ReattachEnv, stderr.String())
			}
			if v, found := strings.CutPrefix(strings.TrimSpace(line), sdk.ReattachEnv+"="); found {
				value = strings.Trim(v, "'")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no reattach line within 30s")
		}
	}
	go func() {
		for range lines {
		}
	}()
	reattach, err := sdk.ParseReattach(value)
	if err != nil {
		t.Fatal(err)
	}
	if reattach["testkit"].Pid != cmd.Process.Pid {
		t.Fatalf("reattach %+v, want pid %d", reattach, cmd.Process.Pid)
	}
	l := newLoader(t)
	l.Reattach = reattach // no Dirs, no pins: nothing is started
	for i := range 2 {
		inst, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()})
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		res, logs := run(t, inst, t.TempDir(), map[string]any{"mode": "ok"}, nil)
		inst.Kill()
		if res.Error != "" || res.Outputs["mode"] != "ok" || !slices.Contains(stdout(logs), "hello from testkit") {
			t.Fatalf("job %d: result %+v, logs %+v", i, res, logs)
		}
	}
	// Still running after two jobs: the developer stops it.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("the plugin in debug mode is gone after the jobs: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("stopped with Ctrl-C: %v; stderr: %s", err, stderr.String())
	}
	if _, err := l.Start(t.Context(), "testkit", pluginhost.StartOptions{WorkDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "is the plugin still running in debug mode?") {
		t.Fatalf("reattach to a stopped plugin: %v", err)
	}
}

// A plugin binary run by hand says what it is and names describe,
// instead of go-plugin's banner (issue 29 item 9).
func TestPluginRunByHandNamesDescribe(t *testing.T) {
	out, err := exec.Command(testkit(t)).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "is a byoc component plugin") ||
		!strings.Contains(string(out), "testkit describe") || !strings.Contains(string(out), "testkit debug") {
		t.Fatalf("exit %v, output:\n%s", err, out)
	}
}
