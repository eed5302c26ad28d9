package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CLI runs the real byoc binary against one imsd, with a config file of
// its own in which a context "test" (the imsd's URL and admin token) is
// added and in use.
type CLI struct {
	tb     testing.TB
	Config string // the BYOC_CONFIG file
}

// NewCLI returns a CLI for ims, its context already added.
func NewCLI(tb testing.TB, ims *IMS) *CLI {
	tb.Helper()
	c := &CLI{tb: tb, Config: filepath.Join(tb.TempDir(), "byoc.json")}
	c.Run(0, "context", "add", "test", "--server", ims.URL(), "--token", ims.AdminToken, "--use")
	return c
}

// NewCLIWith is NewCLI for a context of server and token written to
// config, for a test that puts something between the CLI and imsd.
func NewCLIWith(tb testing.TB, config, server, token string) *CLI {
	tb.Helper()
	c := &CLI{tb: tb, Config: config}
	c.Run(0, "context", "add", "test", "--server", server, "--token", token, "--use")
	return c
}

// Cmd returns the byoc command for args, with the CLI's config.
func (c *CLI) Cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(Binaries(c.tb), "byoc"), args...)
	cmd.Env = append(os.Environ(), "BYOC_CONFIG="+c.Config)
	return cmd
}

// Exec runs byoc with args and returns what it printed and its exit code.
func (c *CLI) Exec(args ...string) (stdout, stderr string, code int) {
	c.tb.Helper()
	cmd := c.Cmd(args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.tb.Fatalf("run byoc: %v", err)
	}
	return o.String(), e.String(), code
}

// Run runs byoc with args, fails the test unless it exits with wantCode,
// and returns its stdout followed by its stderr.
func (c *CLI) Run(wantCode int, args ...string) string {
	c.tb.Helper()
	out, e, code := c.Exec(args...)
	if code != wantCode {
		c.tb.Fatalf("byoc %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, out, e)
	}
	return out + e
}

// WriteApp writes an app's config files (path relative to the app's
// directory → content) into dir, creating directories as needed.
func WriteApp(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for p, body := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// Pushed is what PushApp did.
type Pushed struct {
	Dir    string // the app's directory, for later edits and pushes
	Output string // byoc app push's stdout and stderr
}

// PushApp writes files into a new directory and pushes them with byoc app
// push, which must succeed.
func (c *CLI) PushApp(files map[string]string) Pushed {
	c.tb.Helper()
	dir := c.tb.TempDir()
	WriteApp(c.tb, dir, files)
	return Pushed{Dir: dir, Output: c.Run(0, "app", "push", dir)}
}

// EnrollToken returns the enrolment token the push printed for the
// install it created (the first, if it created several), failing the test
// if there is none.
func (p Pushed) EnrollToken(tb testing.TB) string {
	tb.Helper()
	_, rest, ok := strings.Cut(p.Output, "shown once; expires")
	if ok {
		_, rest, ok = strings.Cut(rest, "\n")
	}
	if ok {
		rest, _, _ = strings.Cut(rest, "\n\n")
		if tok := strings.TrimSpace(rest); tok != "" {
			return tok
		}
	}
	tb.Fatalf("no enrolment token in the push's output:\n%s", p.Output)
	return ""
}
