package action_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/plugins/action"
	"github.com/byoc-dev/byoc/plugins/action/sandbox"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

// needSandbox skips a test that needs bubblewrap and cgroups, saying why.
func needSandbox(t *testing.T) {
	t.Helper()
	sb := sandbox.New(t.Context(), sandbox.Options{})
	if sb.Level() != sandbox.LevelBubblewrap || len(sb.Warnings()) > 0 {
		t.Skipf("full sandbox not available here (level %s): %q", sb.Level(), sb.Warnings())
	}
}

// applyWith runs one apply of cfg through plugin p and returns the result,
// the log as text and the work dir.
func applyWith(t *testing.T, p sdk.Plugin, cfg map[string]any, env map[string]string) (*sdk.Result, string, string) {
	t.Helper()
	dir := t.TempDir()
	c := sdktest.Start(t, p)
	res, logs := sdktest.Run(t, c, sdk.OpApply, &sdk.RunRequest{Job: sdk.JobContext{JobID: "j1", WorkDir: dir}, Config: cfg, Env: env})
	var b strings.Builder
	for _, l := range logs {
		b.WriteString(l.Text + "\n")
	}
	return res, b.String(), dir
}

func oneStep(script string, extra map[string]any) map[string]any {
	cfg := map[string]any{"steps": []any{map[string]any{"name": "s", "script": script}}}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

func TestSandboxFileSystem(t *testing.T) {
	needSandbox(t)
	outside := t.TempDir()
	hostTmp := "byoc-sandbox-test-" + strconv.Itoa(os.Getpid())
	script := `
for p in /usr/byoc-x /etc/byoc-x /byoc-x /var/byoc-x ` + outside + `/x; do
  if touch "$p" 2>/dev/null; then echo "WROTE $p"; else echo "refused $p"; fi
done
ls /root /home ` + outside + ` >/dev/null 2>&1 && echo "SAW host dirs" || true
touch ./inside
echo private > /tmp/` + hostTmp + ` && cat /tmp/` + hostTmp + `
test -r /etc/shadow && test -s /etc/shadow && echo "READ shadow" || true
`
	res, log, work := applyWith(t, action.New(), oneStep(script, nil), nil)
	if res.Err() != nil {
		t.Fatalf("apply: %v\n%s", res.Err(), log)
	}
	for _, bad := range []string{"WROTE", "SAW host dirs", "READ shadow"} {
		if strings.Contains(log, bad) {
			t.Errorf("step could do what it must not (%s):\n%s", bad, log)
		}
	}
	if strings.Count(log, "refused ") != 5 || !strings.Contains(log, "private") {
		t.Errorf("log:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file outside the work dir exists on the host: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "inside")); err != nil {
		t.Errorf("file in the work dir missing on the host: %v", err)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), hostTmp)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the step's /tmp is the host's: %v", err)
	}
}

func TestSandboxNetwork(t *testing.T) {
	needSandbox(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	// perl is part of every Debian system (perl-base); sh cannot open sockets.
	script := `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:` + port + `", Timeout => 3); print $s ? "CONNECTED\n" : "no connection: $@\n"'`
	for _, tt := range []struct {
		network bool
		want    string
	}{{false, "no connection"}, {true, "CONNECTED"}} {
		t.Run("network="+strconv.FormatBool(tt.network), func(t *testing.T) {
			res, log, _ := applyWith(t, action.New(), oneStep(script, map[string]any{"sandbox": map[string]any{"network": tt.network}}), nil)
			if res.Err() != nil || !strings.Contains(log, tt.want) {
				t.Errorf("want %q; result %+v, log:\n%s", tt.want, res, log)
			}
		})
	}
}

func TestSandboxEnvironmentAndPIDs(t *testing.T) {
	needSandbox(t)
	t.Setenv("BYOC_AGENT_ONLY", "agent-secret")
	res, log, _ := applyWith(t, action.New(), oneStep(`env; echo "procs=$(ls /proc | grep -c '^[0-9]')"; echo "mypid=$$"; hostname`, nil),
		map[string]string{"GIVEN": "yes", "PATH": "/usr/bin:/bin"})
	if res.Err() != nil {
		t.Fatalf("apply: %v\n%s", res.Err(), log)
	}
	if strings.Contains(log, "agent-secret") || !strings.Contains(log, "GIVEN=yes") {
		t.Errorf("environment is not exactly the request's:\n%s", log)
	}
	// Own PID namespace: bubblewrap's init, the shell and ls, nothing of
	// the host.
	for _, line := range strings.Split(log, "\n") {
		if n, ok := strings.CutPrefix(line, "procs="); ok {
			if c, _ := strconv.Atoi(n); c == 0 || c > 5 {
				t.Errorf("step sees %d processes; want only its own", c)
			}
		}
	}
	if !strings.Contains(log, "byoc-step") {
		t.Errorf("hostname is the host's:\n%s", log)
	}
}

func TestSandboxMemoryLimit(t *testing.T) {
	needSandbox(t)
	start := time.Now()
	res, log, _ := applyWith(t, action.New(), oneStep(`echo before; perl -e '$x = "a" x (256 << 20); print length($x), "\n"'; echo after`,
		map[string]any{"sandbox": map[string]any{"memory_mb": 32}}), nil)
	if res.ExitCode != 137 || !strings.Contains(res.Error, "exceeded its memory limit of 32 MiB") || strings.Contains(log, "after") {
		t.Errorf("result %+v after %s, log:\n%s", res, time.Since(start), log)
	}
}

func TestSandboxPIDLimit(t *testing.T) {
	needSandbox(t)
	res, log, _ := applyWith(t, action.New(), oneStep(`for i in $(seq 30); do sleep 5 & done; wait`,
		map[string]any{"sandbox": map[string]any{"pids": 10}}), nil)
	if res.Err() == nil || !strings.Contains(strings.ToLower(log), "fork") {
		t.Errorf("30 processes ran under a limit of 10: %+v\n%s", res, log)
	}
}

func TestSandboxStepTimeout(t *testing.T) {
	needSandbox(t)
	mark := "31.4159" + strconv.Itoa(os.Getpid()%1000)
	start := time.Now()
	res, log, _ := applyWith(t, action.New(), map[string]any{"steps": []any{
		map[string]any{"name": "slow", "script": "sleep " + mark + " & sleep " + mark, "timeout": "1s"},
	}}, nil)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("step ran %s past a 1s limit", took)
	}
	if !strings.Contains(res.Error, `step "slow": killed: exceeded its time limit of 1s`) || res.ExitCode == 0 {
		t.Errorf("result %+v, log:\n%s", res, log)
	}
	// Nothing the step started survives it, background processes included.
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), mark) {
			t.Errorf("process %s (%q) outlived its step", e.Name(), b)
		}
	}
}

// Without bubblewrap the step still runs, in namespaces, and the log says
// loudly what isolation is missing.
func TestSandboxFallbackIsLoud(t *testing.T) {
	needSandbox(t)
	res, log, _ := applyWith(t, action.NewWithSandbox(sandbox.Options{DisableBubblewrap: true}),
		oneStep(`perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr => "1.1.1.1:53", Timeout => 2); print $s ? "CONNECTED\n" : "no connection\n"'`, nil), nil)
	if res.Err() != nil {
		t.Fatalf("apply: %v\n%s", res.Err(), log)
	}
	if !strings.Contains(log, "sandbox: WARNING: bubblewrap is disabled; isolating with Linux namespaces only") ||
		!strings.Contains(log, "file system is NOT read-only") || !strings.Contains(log, "no connection") {
		t.Errorf("log:\n%s", log)
	}
}

// The component's state dir is writable in the sandbox like the work dir;
// the rest of the host stays read-only.
func TestSandboxStateDir(t *testing.T) {
	needSandbox(t)
	work, state, outside := t.TempDir(), t.TempDir(), t.TempDir()
	script := `echo kept > "$BYOC_STATE_DIR/kept" && echo "wrote state"
touch ` + outside + `/x 2>/dev/null && echo "WROTE outside" || echo "refused outside"`
	res, logs := sdktest.Run(t, sdktest.Start(t, action.New()), sdk.OpApply, &sdk.RunRequest{
		Job:    sdk.JobContext{JobID: "j1", WorkDir: work, StateDir: state},
		Config: oneStep(script, nil), Env: map[string]string{"PATH": "/usr/bin:/bin", "BYOC_STATE_DIR": state},
	})
	var b strings.Builder
	for _, l := range logs {
		b.WriteString(l.Text + "\n")
	}
	log := b.String()
	if res.Err() != nil || !strings.Contains(log, "wrote state") || !strings.Contains(log, "refused outside") ||
		!strings.Contains(log, "writable work dir and component state dir only") {
		t.Fatalf("apply: %v\n%s", res.Err(), log)
	}
	if b, err := os.ReadFile(filepath.Join(state, "kept")); err != nil || string(b) != "kept\n" {
		t.Errorf("state file on the host: %q, %v", b, err)
	}
}
