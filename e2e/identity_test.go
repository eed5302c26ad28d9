package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// Two agentd processes sharing one identity (a state dir copied to a
// second machine) used to replace each other's stream every few seconds,
// forever, logged at INFO. Now the second is refused while the first
// holds the stream, both sides say why, the metric counts it, and the
// install's agent status carries the warning; the flapping stops.
func TestSharedIdentityIsDetectedAndStopsFlapping(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	dirA := filepath.Join(t.TempDir(), "agent")
	a := cluster.StartAgent(t, ims.URL(), token, dirA)
	waitConnected(t, ims, "acme")
	// The copy: the same identity file in another state dir.
	dirB := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(dirB, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dirA)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dirA, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dirB, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := cluster.StartAgent(t, ims.URL(), "", dirB)

	var warning string
	cluster.Eventually(t, 20*time.Second, "the install to report an identity conflict", func() bool {
		r, err := ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
		if err != nil || r.Msg.Install.Agent == nil {
			return false
		}
		warning = r.Msg.Install.Agent.IdentityConflict
		return warning != ""
	})
	if !strings.Contains(warning, "two agentd processes share this agent's identity") {
		t.Fatalf("warning = %q", warning)
	}
	refused := regexp.MustCompile(`level=ERROR msg="stream to imsd ended; reconnecting".*share this agent's identity`)
	cluster.Eventually(t, 10*time.Second, "the refused agent to log the conflict at ERROR", func() bool {
		return refused.MatchString(a.Output()) || refused.MatchString(b.Output())
	})
	if n := metric(t, ims.URL(), "byoc_agent_identity_conflicts_total"); n < 1 {
		t.Fatalf("byoc_agent_identity_conflicts_total = %v, want at least 1", n)
	}
	// The stream stays with one process: no more replacements.
	replaced := func() int {
		return strings.Count(a.Output(), "replaced by a newer stream") + strings.Count(b.Output(), "replaced by a newer stream")
	}
	before := replaced()
	time.Sleep(3 * time.Second)
	if after := replaced(); after != before {
		t.Fatalf("the two processes still replace each other: %d replacements in 3 s", after-before)
	}
	// The install still reads as connected: one process serves it.
	waitConnected(t, ims, "acme")
	// Once the holder is gone, the other takes over.
	holder, other := a, b
	if refused.MatchString(a.Output()) {
		holder, other = b, a
	}
	holder.Kill()
	mark := len(other.Output())
	cluster.Eventually(t, 20*time.Second, "the other process to take the stream", func() bool {
		return strings.Contains(other.Output()[mark:], `msg="connected to imsd"`)
	})
}

// metric reads one unlabelled counter from imsd's /metrics.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	r, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}
