package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// An idle agent's stream costs imsd about 4 KiB of goroutine stack: the
// whole agent path (agentwire, then agentapi's Serve and what it calls)
// must let the stack shrink back once the hello is done. agentwire's own
// TestIdleStackShrinks uses an echo handler, so it cannot see a frame
// (a defer, a large local) added on the idle path through agentapi; this
// test runs the real imsd binary with real agents' handshakes and reads
// its own runtime figures. A frame kept on that path doubled the stacks
// (8.1 KiB) and took memory per idle agent over its 16 KiB target.
func TestIdleAgentStreamStackShrinks(t *testing.T) {
	skipShort(t)
	debug := cluster.FreeAddr(t)
	// No heartbeats from these agents: a long heartbeat keeps them
	// connected for the test's length.
	p := cluster.StartIMSProcess(t, nil, "--log-level", "warn", "--heartbeat", "30s", "--lease", "60s", "--debug-addr", debug)
	admin := p.Client()
	metric := func(name string) float64 {
		t.Helper()
		// Each collection halves a stack at most once: four bring an
		// idle stack from its peak back to its floor.
		for range 4 {
			r, err := http.Get("http://" + debug + "/debug/pprof/heap?gc=1")
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
		}
		r, err := http.Get(p.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return f
			}
		}
		t.Fatalf("imsd's /metrics has no %s", name)
		return 0
	}
	const n = 150
	tokens := make([]string, n)
	for i := range n {
		_, tokens[i] = cluster.NewInstall(t, admin, "idle", fmt.Sprintf("idle-%03d", i))
	}
	stacks0, g0 := metric("go_memstats_stack_inuse_bytes"), metric("go_goroutines")
	for i := range n {
		a := cluster.EnrollRaw(t, p.URL(), tokens[i])
		a.Connect(t, 1)
	}
	cluster.Eventually(t, 60*time.Second, "every agent connected", func() bool {
		return metric("go_goroutines")-g0 >= n
	})
	per := (metric("go_memstats_stack_inuse_bytes") - stacks0) / n
	perG := (metric("go_goroutines") - g0) / n
	t.Logf("%.1f KiB of goroutine stack and %.1f goroutines per idle agent stream", per/1024, perG)
	if perG > 1.5 {
		t.Errorf("%.1f goroutines per idle agent stream; want one (agentwire's connection goroutine)", perG)
	}
	if per > 6<<10 {
		t.Errorf("%.1f KiB of goroutine stack per idle agent stream; want about 4 KiB (did a frame or a defer join agentapi's idle path?)", per/1024)
	}
}
