package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// TestConsoleInATerminal drives the real byoc console in a real terminal
// (tmux) against a real imsd and a real agent: open, filter, drill into an
// install, run an action and watch it finish, read its log again, quit.
func TestConsoleInATerminal(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "acme")
	cluster.NewInstall(t, c, "shop", "globex")
	cluster.StartAgent(t, ims.URL(), tok, t.TempDir())
	bin := filepath.Join(cluster.Binaries(t), "byoc")

	term := cluster.StartTerminal(t, 120, 32, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		bin, "--server", ims.URL(), "--token", ims.AdminToken)
	// The fleet arrives by the watch stream, and so does the agent coming online.
	term.WaitFor("acme online", func(s string) bool { return lineWith(s, "acme", "online") && lineWith(s, "globex", "none") })

	term.Keys("/")
	term.Type("glob")
	s := term.WaitText("(/glob: 1 of 2)")
	if lineWith(s, "acme", "shop") {
		t.Fatalf("the filter /glob still shows acme:\n%s", s)
	}
	term.Keys("Escape")
	term.WaitFor("both installs again", func(s string) bool { return lineWith(s, "acme", "online") && lineWith(s, "globex", "none") })

	// acme sorts first: open it, then run an action.
	term.Keys("Enter")
	term.WaitText("installs › acme", "INPUTS", "JOBS (0)")
	term.Keys("a")
	// The app's actions (none: the app has no config), the ad-hoc script last.
	term.WaitText("Run an action on acme", "ad-hoc script…")
	term.Keys("Enter")
	term.WaitText("script:")
	term.Type("for i in 1 2 3; do echo tui-line-$i; done; echo tui-done")
	term.Keys("Enter")
	term.WaitText("Confirm: run `for i in 1 2 3")
	term.Keys("y")
	s = term.WaitText("› logs", "tui-line-1", "tui-line-3", "tui-done", "succeeded (exit 0)")

	// Back to the install: the job is listed, pushed by the watch.
	term.Keys("Escape")
	term.WaitFor("the job in the install's list", func(s string) bool { return lineWith(s, "action apply", "succeeded") })
	term.Keys("Enter")
	term.WaitText("tui-line-2", "succeeded")
	// Search in the log.
	term.Keys("/")
	term.Type("line-2")
	term.Keys("Enter")
	term.WaitText("match 1 of 1")

	term.Keys(":")
	term.Type("q")
	term.Keys("Enter")
	term.WaitFor("the console to exit", func(string) bool { return term.Dead() })
	_ = s
}

// TestConsoleReadOnly checks that --readonly leaves the action and
// break-glass keys unbound in the real program.
func TestConsoleReadOnly(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	bin := filepath.Join(cluster.Binaries(t), "byoc")
	term := cluster.StartTerminal(t, 100, 40, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		bin, "--server", ims.URL(), "--token", ims.AdminToken, "--readonly")
	term.WaitText("[read-only]", "acme")
	term.Keys("Enter", "a", "b")
	term.Keys("?")
	s := term.WaitText("Keys", "follow / pause")
	if strings.Contains(s, "script:") || strings.Contains(s, "run an action") || strings.Contains(s, "break-glass") {
		t.Fatalf("read-only console offers an action:\n%s", s)
	}
}

// lineWith reports whether one line of s holds all of parts.
func lineWith(s string, parts ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestConsoleFleetStateFilterAndSearchStatus: in the real program, the
// fleet shows each install's state; an applied filter is cleared by esc
// (staying on the fleet) and `/` opens on it; a log search's status does
// not outlive the log.
func TestConsoleFleetStateFilterAndSearchStatus(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "acme")
	cluster.NewInstall(t, c, "shop", "globex")
	cluster.StartAgent(t, ims.URL(), tok, t.TempDir())
	bin := filepath.Join(cluster.Binaries(t), "byoc")

	term := cluster.StartTerminal(t, 160, 32, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		bin, "--server", ims.URL(), "--token", ims.AdminToken)
	term.WaitFor("the fleet with states", func(s string) bool {
		return strings.Contains(s, "STATE") && strings.Contains(s, "HEALTH") && lineWith(s, "acme", "new", "online") && lineWith(s, "globex", "new", "none")
	})

	term.Keys("/")
	term.Type("glob")
	term.Keys("Enter")
	term.WaitText("(/glob: 1 of 2)")
	term.Keys("/")
	term.WaitText("filter: glob")
	term.Keys("Escape") // leaves the input (clearing the filter as it did)
	term.WaitFor("both installs again", func(s string) bool { return lineWith(s, "acme", "online") && lineWith(s, "globex", "none") })
	term.Keys("/")
	term.Type("acme")
	term.Keys("Enter")
	term.WaitText("(/acme: 1 of 2)")
	term.Keys("Escape") // clears the applied filter, stays on the fleet
	s := term.WaitFor("the filter cleared", func(s string) bool { return lineWith(s, "globex", "none") && !strings.Contains(s, "/acme") })
	if strings.Contains(s, "›") {
		t.Fatalf("esc on an applied filter left the fleet:\n%s", s)
	}

	term.Keys("Enter")
	term.WaitText("installs › acme")
	term.Keys("a")
	term.WaitText("ad-hoc script…")
	term.Keys("Enter")
	term.WaitText("script:")
	term.Type("echo needle-one; echo hay")
	term.Keys("Enter")
	term.WaitText("Confirm:")
	term.Keys("y")
	term.WaitText("› logs", "needle-one", "succeeded (exit 0)")
	term.Keys("/")
	term.Type("needle")
	term.Keys("Enter")
	term.WaitText("/needle: match 1 of 1")
	term.Keys("Escape")
	s = term.WaitFor("the install view", func(s string) bool {
		return strings.Contains(s, "installs › acme") && !strings.Contains(s, "› logs")
	})
	if strings.Contains(s, "match 1 of 1") {
		t.Fatalf("the log search's status outlived the log:\n%s", s)
	}
}

// TestConsoleActionPicker: in the real program against a real app, `a`
// lists the app's actions (name, mode, description) before the ad-hoc
// script, and enter on one starts an action run that succeeds.
func TestConsoleActionPicker(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.WorkflowInterval = 200 * time.Millisecond
	ims := cluster.StartIMS(t, opts)
	cli := cluster.NewCLI(t, ims)
	pushed := cli.PushApp(actionApp)
	cluster.StartAgent(t, ims.URL(), pushed.EnrollToken(t), t.TempDir())
	if out := cli.Run(0, "install", "provision", "acme", "--wait"); !strings.Contains(out, "succeeded") {
		t.Fatalf("provision:\n%s", out)
	}
	bin := filepath.Join(cluster.Binaries(t), "byoc")
	term := cluster.StartTerminal(t, 140, 32, []string{"BYOC_CONFIG=" + filepath.Join(t.TempDir(), "config.json")},
		bin, "--server", ims.URL(), "--token", ims.AdminToken)
	term.WaitFor("acme online", func(s string) bool { return lineWith(s, "acme", "active", "online") })
	// The install view shows its components (state, last deploy,
	// outputs), its newest workflow's steps and the app's actions.
	term.Keys("Enter")
	term.WaitFor("the install's parts", func(s string) bool {
		return strings.Contains(s, "installs › acme") && lineWith(s, "revision 1", "state active") &&
			lineWith(s, "db", "succeeded", "provision rev 1", "outputs url=pg-") &&
			lineWith(s, "provision", "succeeded", "rev 1") && lineWith(s, "migrate", "maintenance", "Migrates the database.") &&
			!strings.Contains(s, "arrive with")
	})
	term.Keys("a")
	s := term.WaitFor("the app's actions", func(s string) bool {
		return strings.Contains(s, "Run an action on acme") && strings.Contains(s, "ad-hoc script…") && lineWith(s, "migrate", "maintenance", "Migrates the database.") && lineWith(s, "health", "maintenance", "Checks the database answers.")
	})
	if strings.Index(s, "ad-hoc script…") < strings.Index(s, "migrate") || strings.Index(s, "ad-hoc script…") < strings.Index(s, "Checks the database") {
		t.Fatalf("the ad-hoc script should come after the app's actions:\n%s", s)
	}
	if strings.Index(s, "health") < strings.Index(s, "migrate") {
		term.Keys("Down")
	}
	term.Keys("Enter")
	term.WaitText("Confirm: run action migrate on acme")
	term.Keys("y")
	term.WaitText("action migrate started on acme")
	term.Keys("Escape")
	term.WaitFor("the action run as the install's newest workflow, done", func(s string) bool {
		return strings.Contains(s, "installs › acme") && lineWith(s, "wf_", "action", "succeeded") && lineWith(s, "succeeded", "migrate")
	})
}
