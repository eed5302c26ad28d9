package cluster

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
)

// Terminal is a program running in a real terminal: a detached tmux
// session on a private tmux server, so tests drive the console exactly as
// a user's keyboard would and read what the screen shows.
type Terminal struct {
	tb     testing.TB
	socket string
}

// StartTerminal runs argv in a new w×h tmux terminal and kills it at
// cleanup. It skips the test, saying why, when tmux is not installed.
func StartTerminal(tb testing.TB, w, h int, env []string, argv ...string) *Terminal {
	tb.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		tb.Skip("tmux is not installed (apt-get install tmux): skipping the real-terminal test")
	}
	t := &Terminal{tb: tb, socket: "byoc-test-" + strings.ToLower(auth.NewID(""))}
	shell := strings.Join(quoteAll(argv), " ")
	if len(env) > 0 {
		shell = "env " + strings.Join(quoteAll(env), " ") + " " + shell
	}
	// Keep the pane after the program exits so its last screen can be read.
	t.tmux("-f", "/dev/null", "new-session", "-d", "-s", "main", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h), shell)
	t.tmux("set-option", "-t", "main", "remain-on-exit", "on")
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("terminal at the end:\n%s", t.Screen())
		}
		exec.Command("tmux", "-L", t.socket, "kill-server").Run()
	})
	return t
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

func (t *Terminal) tmux(args ...string) string {
	t.tb.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", t.socket}, args...)...).CombinedOutput()
	if err != nil {
		t.tb.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Keys sends tmux key names ("Enter", "Escape", "Down", "a", ...).
func (t *Terminal) Keys(keys ...string) {
	t.tb.Helper()
	t.tmux(append([]string{"send-keys", "-t", "main"}, keys...)...)
}

// Type types text literally.
func (t *Terminal) Type(text string) {
	t.tb.Helper()
	t.tmux("send-keys", "-t", "main", "-l", text)
}

// Screen returns what the terminal shows, without colour.
func (t *Terminal) Screen() string {
	t.tb.Helper()
	return t.tmux("capture-pane", "-p", "-t", "main")
}

// ScreenANSI returns what the terminal shows, with colour escapes.
func (t *Terminal) ScreenANSI() string {
	t.tb.Helper()
	return t.tmux("capture-pane", "-p", "-e", "-t", "main")
}

// WaitFor waits until the screen satisfies cond and returns that screen.
func (t *Terminal) WaitFor(what string, cond func(screen string) bool) string {
	t.tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := t.Screen()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.tb.Fatalf("terminal never showed %s; last screen:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitText waits until the screen contains every one of texts.
func (t *Terminal) WaitText(texts ...string) string {
	t.tb.Helper()
	return t.WaitFor(fmt.Sprintf("%q", texts), func(s string) bool {
		for _, x := range texts {
			if !strings.Contains(s, x) {
				return false
			}
		}
		return true
	})
}

// Dead reports whether the program in the terminal has exited.
func (t *Terminal) Dead() bool {
	t.tb.Helper()
	return strings.TrimSpace(t.tmux("display-message", "-p", "-t", "main", "#{pane_dead}")) == "1"
}

// Resize resizes the terminal to w×h, as a user resizing their window.
func (t *Terminal) Resize(w, h int) {
	t.tb.Helper()
	t.tmux("resize-window", "-t", "main", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h))
}
