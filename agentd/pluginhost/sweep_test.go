package pluginhost_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// holdPlugin is an agent-like process (the test binary run as
// "hold-plugin"): it starts an action plugin as the agent does, says
// "ready PGID", and waits to be killed.
func holdPlugin() {
	self, err := os.Executable()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	l := &pluginhost.Loader{SelfExe: self, SelfArgs: func(typ string) []string { return []string{"plugin", typ} }, Builtins: []string{"action"}}
	inst, err := l.Start(context.Background(), "action", pluginhost.StartOptions{WorkDir: os.TempDir()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready", inst.PGID())
	select {}
}

// socketDirs lists the plugin socket dirs in dir.
func socketDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "byoc-plugin-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// An agent killed with SIGKILL leaves its plugins' socket dirs; a sweep
// removes them, and keeps those of live agents (this one, with a plugin
// running) and anything not named after an agent.
func TestSweepSocketDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	// A live plugin of this process: its dir is in use.
	inst, _ := start(t, newLoader(t), "action", nil)
	live := socketDirs(t, tmp)
	if len(live) != 1 {
		t.Fatalf("socket dirs with one plugin running: %v", live)
	}
	if !strings.HasPrefix(filepath.Base(live[0]), fmt.Sprintf("byoc-plugin-%d.", os.Getpid())) {
		t.Fatalf("socket dir %s is not named after this process (pid %d)", live[0], os.Getpid())
	}

	// An agent-like process with a plugin running, killed with SIGKILL.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "hold-plugin")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	var pgid int
	if _, err := fmt.Sscanf(line, "ready %d", &pgid); err != nil {
		cmd.Process.Kill()
		t.Fatalf("helper said %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// Its plugin dies with it (parent-death signal); wait for that.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pgid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var left []string
	for _, d := range socketDirs(t, tmp) {
		if strings.HasPrefix(filepath.Base(d), fmt.Sprintf("byoc-plugin-%d.", cmd.Process.Pid)) {
			left = append(left, d)
		}
	}
	if len(left) != 1 {
		t.Fatalf("the killed agent left socket dirs %v, want one (the leftover this sweep is for)", left)
	}

	// Not ours to remove: a name without an owner, and a symlink named
	// like a dead agent's dir (its target must survive).
	foreign := filepath.Join(tmp, "byoc-plugin-123456")
	target := t.TempDir()
	link := filepath.Join(tmp, fmt.Sprintf("byoc-plugin-%d.1-x", cmd.Process.Pid))
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	removed, err := pluginhost.SweepSocketDirs("")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, left) {
		t.Errorf("removed %v, want exactly the killed agent's %v", removed, left)
	}
	for _, keep := range []string{live[0], foreign, link, target} {
		if _, err := os.Lstat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	// The live plugin still works, and Kill removes its dir.
	if _, err := inst.Describe(t.Context()); err != nil {
		t.Fatalf("the live plugin broke after the sweep: %v", err)
	}
	inst.Kill()
	if _, err := os.Stat(live[0]); !os.IsNotExist(err) {
		t.Errorf("Kill left %s: %v", live[0], err)
	}
}

// A temp dir too long for a unix socket is refused with a message that
// says what to change, not go-plugin's bare "bind: invalid argument".
func TestSocketDirTooLong(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := &pluginhost.Loader{SelfExe: self, SelfArgs: func(typ string) []string { return []string{"plugin", typ} }, Builtins: []string{"action"}}
	_, err = l.Start(context.Background(), "action", pluginhost.StartOptions{WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "too long for a plugin's unix socket") || !strings.Contains(err.Error(), "shorter TMPDIR") {
		t.Fatalf("start with a %d-byte temp dir: %v, want the too-long error", len(long), err)
	}
	if left, _ := filepath.Glob(filepath.Join(long, "byoc-plugin-*")); len(left) != 0 {
		t.Errorf("the refused socket dir was left behind: %v", left)
	}
}
