package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// crashingAgent is an agentd that crashes two seconds after each start
// (after its start was counted), as a new version that dies under its
// supervisor would: it runs the real agentd (REAL) in its own process and
// kills it, unless the agent rolled back meanwhile (agentd in its
// directory is no longer this script). --version answers as REAL.
const crashingAgent = `#!/bin/sh
real=REAL
case "$1" in --version) exec "$real" --version ;; esac
self=$$
( sleep 2; if head -c 2 "$0" | grep -q '#!'; then kill -9 $self; fi ) &
exec "$real" "$@"
`

// A new agent version that crash-loops under its supervisor (issue 27) is
// rolled back by the agent alone: at its fourth start without having
// connected it renames the old binaries (*.prev) back and runs the old
// agentd, which reconnects and reports the update rolled back, cause
// crash_loop; imsd audits it.
func TestAgentCrashLoopRolledBack(t *testing.T) {
	// v1.6.0 is outside the versions imsd v1.5.0 serves: it never connects
	// (and so never confirms) in the two seconds it lives.
	rig := startAgentRig(t, "v1.4.0", "v1.6.0")
	ims, cli := rig.ims, rig.cli
	crashing := rig.builds["v1.6.0"]
	script := filepath.Join(t.TempDir(), "agentd")
	if err := os.WriteFile(script, []byte(strings.Replace(crashingAgent, "REAL", filepath.Join(crashing, "agentd"), 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	ref := rig.publish(t, "v1.6.0", script, filepath.Join(crashing, "byoc-plugins"))

	started := rig.startAgent(t, "v1.4.0", "shop", "acme", "--allow", ">=1.4 <2", "--window", "daily 00:00-24:00 UTC")
	bin, state, agent := started.bin, started.state, started.proc
	agentOf := func() *imsv1.AgentStatus { return rig.agentOf("acme") }
	cluster.Eventually(t, 60*time.Second, "the policy to be reported", func() bool { return agentOf().GetUpdate().GetMode() == "allow" })
	cli.Run(0, "agent", "update", "acme", "--release", ref)

	// The agent applies it and runs the new version, which crashes; its
	// supervisor (this test) starts it again, three times.
	for start := 1; start <= 3; start++ {
		cluster.Eventually(t, 90*time.Second, "the new version to crash", agent.Exited)
		if start == 1 && !strings.Contains(agent.Output(), "drained; running the new version") {
			t.Fatalf("the agent did not run the new version:\n%s", agent.Output())
		}
		agent = cluster.StartAgentBin(t, filepath.Join(bin, "agentd"), nil, ims.URL(), "", state)
	}
	// The fourth start rolls back: v1.4.0 reconnects and reports it.
	cluster.Eventually(t, 90*time.Second, "the rollback to be reported", func() bool {
		a := agentOf()
		return a.GetConnected() && a.GetVersion() == "v1.4.0" && a.GetUpdate().GetLastKind() == "rolled_back"
	})
	a := agentOf()
	if a.GetUpdate().GetLastCause() != "crash_loop" || !strings.Contains(a.GetUpdate().GetLastReason(), "started 3 times without reconnecting") ||
		a.GetUpdate().GetLastOfferId() != a.GetUpdateOffer().GetId() {
		t.Fatalf("rollback report: %v", a.GetUpdate())
	}
	if out, _ := exec.Command(filepath.Join(bin, "agentd"), "--version").Output(); !strings.Contains(string(out), " v1.4.0 ") {
		t.Fatalf("agentd after the rollback: %s", out)
	}
	if _, err := os.Stat(filepath.Join(bin, "agentd.prev")); !os.IsNotExist(err) {
		t.Fatalf("agentd.prev left after the rollback: %v", err)
	}
	audit := cli.Run(0, "audit", "list", "--install", "acme", "-o", "json")
	if !strings.Contains(audit, `"agent.update_rolled_back"`) || !strings.Contains(audit, "crash_loop") {
		t.Fatalf("audit lacks the rollback:\n%s", audit)
	}
}
