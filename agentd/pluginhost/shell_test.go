package pluginhost_test

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/byoc-dev/byoc/agentd/pluginhost"
)

// ptyShell starts argv through l.ShellCommand on a fresh PTY and returns
// a function that waits for output matching re, and the PTY to type in.
func ptyShell(t *testing.T, l *pluginhost.Loader, argv ...string) (func(re string) string, func(s string)) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := l.ShellCommand(argv, pluginhost.ShellOptions{Work: t.TempDir(), TTY: tty.Name()})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "TERM=xterm"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var mu sync.Mutex
	var out bytes.Buffer
	changed := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		ptmx.Close()
	})
	from := 0
	wait := func(pattern string) string {
		t.Helper()
		re := regexp.MustCompile(pattern)
		deadline := time.After(15 * time.Second)
		for {
			mu.Lock()
			b := out.Bytes()[from:]
			loc := re.FindIndex(b)
			s := string(b)
			if loc != nil {
				from += loc[1]
			}
			mu.Unlock()
			if loc != nil {
				return s
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("no output matching %s within 15s:\n%s", pattern, s)
			}
		}
	}
	return wait, func(s string) { ptmx.Write([]byte(s)) }
}

// A support shell in the bubblewrap sandbox: its terminal is the PTY,
// at its own path (tty names /dev/pts/N, and /dev/pts holds nothing
// else), and Ctrl-C interrupts the foreground command.
func TestShellCommandInSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	l := &pluginhost.Loader{Sandbox: testSandbox(t, "bubblewrap")}
	wait, typ := ptyShell(t, l, "/bin/sh", "-i")
	wait(`\$ $`)
	typ("tty; ls /dev/pts | wc -l\n")
	if out := wait(`\n1\r\n`); !regexp.MustCompile(`/dev/pts/\d+\r\n`).MatchString(out) {
		t.Fatalf("tty in the sandbox:\n%s", out)
	}
	// The foreground job says it started (from the process that becomes
	// sleep), then ^C must end it.
	wait(`\$ $`)
	typ("sh -c 'echo sleep-started; exec sleep 60'\n")
	wait(`sleep-started\r\n`) // (the typed line has sleep-started;)
	typ("\x03")
	typ("echo after-$((20+22))\n")
	if out := wait(`after-42\r\n`); strings.Contains(out, "Cannot") {
		t.Logf("%s", out)
	}
}
