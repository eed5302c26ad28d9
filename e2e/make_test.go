package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// repoRoot is the repository's root, where the Makefile is.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatalf("no Makefile at the repository root: %v", err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	return root
}

// make help writes plain text when piped (a script, a pager, a CI log) and
// colours the target names only on a terminal.
func TestMakeHelpColoursOnlyATerminal(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "help")
	cmd.Env = append(os.Environ(), "NO_COLOR=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "\x1b") || !strings.Contains(string(out), "  demo ") {
		t.Errorf("make help piped has colour codes or lacks the targets:\n%q", out)
	}
	// The shell stays after make, so that the screen is there to read.
	term := cluster.StartTerminal(t, 160, 40, nil, "sh", "-c", `make --no-print-directory -C "$0" help; sleep 60`, root)
	term.WaitText("List the targets.")
	if ansi := term.ScreenANSI(); !strings.Contains(ansi, "\x1b[36m") {
		t.Errorf("make help on a terminal has no colour:\n%q", ansi)
	}
}

// make demo shows what it builds while it builds (a first build takes
// minutes): each package as go build compiles it, when piped.
func TestMakeDemoBuildShowsProgress(t *testing.T) {
	skipShort(t)
	root := repoRoot(t)
	bin := t.TempDir()
	// A version of its own relinks the four programs, so go build names
	// them even with a warm cache.
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "build-progress", "BIN="+bin, fmt.Sprintf("VERSION=progress-%d", time.Now().UnixNano()))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make build-progress: %v\n%s", err, out)
	}
	for _, want := range []string{"==> building imsd, agentd, byoc-plugins and byoc", "    compiled github.com/byoc-dev/byoc/imsd\n", "    compiled github.com/byoc-dev/byoc/agentd\n", "==> built "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make build-progress output lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{"imsd", "agentd", "byoc-plugins", "byoc"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Errorf("make build-progress built no %s: %v", name, err)
		}
	}
	deps, err := exec.Command("make", "-n", "-C", root, "demo").CombinedOutput()
	if err != nil || !strings.Contains(string(deps), "go build -v") {
		t.Errorf("make demo does not build with progress (make -n demo: %v):\n%s", err, deps)
	}
}

// TestMakeDemo: the README's first command does what it says, with what
// .ci/run installs: it builds, starts imsd, the vendor registry, the build
// agent and an agent from a local install stack, deploys the demo image
// with its lineage, runs an action to its end, and make demo-stop stops
// them all. (The plugin sandbox once hid the demo's OCI layout from the
// build agent, and nothing ran make demo to notice.)
func TestMakeDemo(t *testing.T) {
	skipShort(t)
	root := repoRoot(t)
	bin, demo := t.TempDir(), t.TempDir()
	env := append(os.Environ(), "BYOC_DEMO_ADDR="+unusedAddr(t), "BYOC_DEMO_REGISTRY_ADDR="+unusedAddr(t))
	run := func(ctx context.Context, target string) (string, error) {
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", root, target, "BIN="+bin, "DEMO="+demo)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { run(context.Background(), "demo-stop") })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := run(ctx, "demo")
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	want := []string{"==> step 1/1 run: exit code 0", "step 3\n", "Stop them with: make demo-stop"}
	if _, err := exec.LookPath("docker-registry"); err == nil {
		want = append(want, "Workflow wf_", "succeeded: 1/1 done.",
			"install  oci:"+demo+"/stack-acme/state/registry/acme/web@sha256:")
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("make demo's output lacks %q:\n%s", w, out)
		}
	}
	out, err = run(ctx, "demo-stop")
	if err != nil {
		t.Fatalf("make demo-stop: %v\n%s", err, out)
	}
	for _, w := range []string{"stopped imsd", "stopped agentd "} {
		if !strings.Contains(out, w) {
			t.Errorf("make demo-stop's output lacks %q:\n%s", w, out)
		}
	}
}

// unusedAddr is a loopback address no one listens on right now.
func unusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// build-progress's filter passes each package on as go build names it,
// not when the build ends: mawk (Debian's awk) reads and writes pipes in
// blocks unless told otherwise, which held make demo's progress back for
// minutes (issue 33, item 10). Fed one line at a time, it answers each.
func TestMakeProgressIsLive(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("make", "--no-print-directory", "-s", "-C", root, "progress-filter")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	lines := make(chan string, 4)
	go func() {
		buf := make([]byte, 4096)
		var acc string
		for {
			n, err := out.Read(buf)
			acc += string(buf[:n])
			for {
				i := strings.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				lines <- acc[:i]
				acc = acc[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	for _, pkg := range []string{"github.com/byoc-dev/byoc/imsd", "github.com/byoc-dev/byoc/agentd"} {
		fmt.Fprintln(in, pkg)
		select {
		case got := <-lines:
			if got != "    compiled "+pkg {
				t.Fatalf("filter wrote %q for %s", got, pkg)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the filter held %s back: nothing after 10s with its input still open", pkg)
		}
	}
}
