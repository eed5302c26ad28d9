package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/e2e/cluster"
)

// imsd offers an agent release (byoc agent update, issue 27) and each
// agent decides by its customer's policy: one allowing the release's
// version, inside its window, applies it (runs the new version, which
// reconnects and confirms); a manual one refuses it. Both report their
// policy and decision, which byoc install get and install list -o wide
// show.
func TestAgentAppliesUpdateOffers(t *testing.T) {
	rig := startAgentRig(t, "v1.4.0", "v1.5.0")
	cli, agentOf := rig.cli, rig.agentOf
	repo := rig.repo
	v150 := rig.publishBuild(t, "v1.5.0", "v1.5.0")
	start := func(name string, policy ...string) rigAgent {
		t.Helper()
		return rig.startAgent(t, "v1.4.0", "shop-"+name, name, policy...)
	}
	auto := start("auto", "--allow", ">=1.4 <2", "--window", "daily 00:00-24:00 UTC")
	manual := start("manual")
	cluster.Eventually(t, 60*time.Second, "both agents to report their update policy", func() bool {
		a, m := agentOf("auto"), agentOf("manual")
		return a.GetConnected() && a.GetUpdate().GetMode() == "allow" && m.GetConnected() && m.GetUpdate().GetMode() == "manual"
	})
	if out := cli.Run(0, "install", "list", "-o", "wide"); !strings.Contains(out, "UPDATE") || !strings.Contains(out, ">=1.4 <2 daily 00:00-24:00 UTC") || !strings.Contains(out, "manual") {
		t.Fatalf("install list -o wide:\n%s", out)
	}

	// A bad reference is refused by imsd, naming the flag.
	if o, e, code := cli.Exec("agent", "update", "auto", "--release", "oci://"+repo+":latest"); code == 0 || !strings.Contains(o+e, "--release") {
		t.Fatalf("bad release: exit %d\n%s%s", code, o, e)
	}
	out := cli.Run(0, "agent", "update", "auto", "--release", v150)
	if !strings.Contains(out, "Offered "+v150) {
		t.Fatalf("agent update auto: %s", out)
	}
	cluster.Eventually(t, 90*time.Second, "the auto agent to apply the offer and run v1.5.0", func() bool {
		a := agentOf("auto")
		return a.GetConnected() && a.GetVersion() == "v1.5.0" && a.GetUpdate().GetLastOfferId() == a.GetUpdateOffer().GetId() &&
			(a.GetUpdate().GetLastKind() == "applied" || a.GetUpdate().GetLastKind() == "confirmed")
	})
	cluster.Eventually(t, 60*time.Second, "the update to be confirmed", func() bool {
		return agentOf("auto").GetUpdate().GetLastKind() == "confirmed"
	})
	if auto.proc.Exited() || !strings.Contains(auto.proc.Output(), "imsd offers an agent release") {
		t.Fatalf("the auto agent:\n%s", auto.proc.Output())
	}

	cli.Run(2, "agent", "update", "--release", v150) // neither an install nor a selector
	out = cli.Run(0, "agent", "update", "manual", "--release", v150)
	if !strings.Contains(out, "Offered") {
		t.Fatalf("agent update manual: %s", out)
	}
	cluster.Eventually(t, 60*time.Second, "the manual agent to refuse the offer", func() bool {
		m := agentOf("manual")
		return m.GetUpdate().GetLastKind() == "refused" && m.GetUpdate().GetLastOfferId() == m.GetUpdateOffer().GetId()
	})
	m := agentOf("manual")
	if m.GetVersion() != "v1.4.0" || !strings.Contains(m.GetUpdate().GetLastReason(), "the update policy is manual") {
		t.Fatalf("manual agent: version %s, reason %q", m.GetVersion(), m.GetUpdate().GetLastReason())
	}
	get := cli.Run(0, "install", "get", "manual")
	for _, want := range []string{"Agent updates", "manual (offers are refused", "Last agent update", "refused v1.5.0", "Agent update offer", ": refused"} {
		if !strings.Contains(get, want) {
			t.Fatalf("install get manual lacks %q:\n%s", want, get)
		}
	}
	if out, _ := exec.Command(filepath.Join(manual.bin, "agentd"), "--version").Output(); !strings.Contains(string(out), " v1.4.0 ") {
		t.Fatalf("the manual agent's binary changed: %s", out)
	}
	// imsd audits the offer and the agents' decisions.
	audit := cli.Run(0, "audit", "list", "--install", "manual")
	for _, want := range []string{"agent.update_offered", "agent.update_refused"} {
		if !strings.Contains(audit, want) {
			t.Fatalf("audit lacks %s:\n%s", want, audit)
		}
	}
}
