package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// A vendor cancels an agent rollout whose offer an agent deferred to its
// customer's update window (closed now, opening two minutes later): imsd
// withdraws the offer in the cancel, the agent hears of it (a signed
// withdrawal on its stream), drops the deferred offer and reports it
// withdrawn; when the window opens, it applies nothing. byoc agent
// rollout get shows the install cancelled with the offer withdrawn, and
// both sides' decisions are audited on the install's chain.
func TestAgentRolloutCancelWithdrawsDeferredOffer(t *testing.T) {
	t.Parallel() // mostly waiting for the window, as the other window test
	rig := startAgentRig(t, "v1.4.0", "v1.5.0")
	cli, agentOf := rig.cli, rig.agentOf
	v150 := rig.publishBuild(t, "v1.5.0", "v1.5.0")

	// The window opens at the start of the minute after next: at least
	// a minute to defer, cancel and withdraw before it does.
	opens, win := windowOpeningSoon(2)
	ag := rig.startAgent(t, "v1.4.0", "shop", "deferring", "--allow", ">=1.4 <2", "--window", win)
	cluster.Eventually(t, 60*time.Second, "the agent to report its update policy", func() bool {
		a := agentOf("deferring")
		return a.GetConnected() && a.GetUpdate().GetMode() == "allow" && a.GetUpdate().GetWindow() != ""
	})

	var r struct{ ID string }
	out := cli.Run(0, "agent", "rollout", "create", "--release", v150, "--confirm-within", "10m", "-o", "json")
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID == "" {
		t.Fatalf("%v: %s", err, out)
	}
	cluster.Eventually(t, 60*time.Second, "the agent to defer the offer to its window", func() bool {
		a := agentOf("deferring")
		return a.GetUpdate().GetLastKind() == "deferred" && a.GetUpdate().GetLastOfferId() == a.GetUpdateOffer().GetId()
	})
	offer := agentOf("deferring").GetUpdateOffer().GetId()
	if time.Now().After(opens.Add(-10 * time.Second)) {
		t.Fatalf("the offer was deferred too late to cancel before the window opens (%s)", win)
	}

	out = cli.Run(0, "agent", "rollout", "cancel", r.ID, "--reason", "bad build")
	if !strings.Contains(out, "withdrawn") || !strings.Contains(out, "not rolled back") {
		t.Fatalf("agent rollout cancel: %s", out)
	}
	cluster.Eventually(t, 60*time.Second, "the agent to drop the withdrawn offer", func() bool {
		a := agentOf("deferring")
		return a.GetUpdate().GetLastKind() == "withdrawn" && a.GetUpdate().GetLastOfferId() == offer
	})
	if time.Now().After(opens) {
		t.Fatalf("the withdrawal reached the agent after its window opened (%s): the test proves nothing", win)
	}
	if a := agentOf("deferring"); a.GetUpdateOffer().GetWithdrawTime() == nil || a.GetUpdateOffer().GetWithdrawnBy() == "" {
		t.Fatalf("offer not shown withdrawn: %v", a.GetUpdateOffer())
	}

	// The window opens: nothing is applied.
	time.Sleep(time.Until(opens.Add(20 * time.Second)))
	a := agentOf("deferring")
	if a.GetVersion() != "v1.4.0" || !a.GetConnected() || a.GetUpdate().GetLastKind() != "withdrawn" {
		t.Fatalf("after the window opened: version %s, connected %v, last %s\n%s", a.GetVersion(), a.GetConnected(), a.GetUpdate().GetLastKind(), ag.proc.Output())
	}
	if b, _ := exec.Command(filepath.Join(ag.bin, "agentd"), "--version").Output(); !strings.Contains(string(b), " v1.4.0 ") {
		t.Fatalf("the agent's binary changed: %s\n%s", b, ag.proc.Output())
	}
	if logs := ag.proc.Output(); strings.Contains(logs, "agent update offer applied") || !strings.Contains(logs, "dropped") {
		t.Fatalf("the agent's log:\n%s", logs)
	}

	get := cli.Run(0, "agent", "rollout", "get", r.ID)
	for _, want := range []string{"cancelled", offer, "offer withdrawn", "bad build"} {
		if !strings.Contains(get, want) {
			t.Fatalf("agent rollout get lacks %q:\n%s", want, get)
		}
	}
	cluster.Eventually(t, 30*time.Second, "the rollout to end cancelled", func() bool {
		g, err := rig.ims.Admin().GetRelease(context.Background(), connect.NewRequest(&imsv1.GetReleaseRequest{Id: r.ID}))
		return err == nil && g.Msg.Release.GetState() == imsv1.ReleaseState_RELEASE_STATE_CANCELLED &&
			len(g.Msg.Release.GetInstalls()) == 1 && g.Msg.Release.GetInstalls()[0].GetState() == "cancelled" &&
			strings.Contains(g.Msg.Release.GetInstalls()[0].GetError(), "offer withdrawn")
	})
	if get := cli.Run(0, "install", "get", "deferring"); !strings.Contains(get, "withdrawn by") {
		t.Fatalf("install get lacks the withdrawal:\n%s", get)
	}
	audit := cli.Run(0, "audit", "list", "--install", "deferring")
	for _, want := range []string{"agent.update_deferred", "agent.update_offer_withdrawn", "agent.update_withdrawn"} {
		if !strings.Contains(audit, want) {
			t.Fatalf("audit lacks %s:\n%s", want, audit)
		}
	}
}

// windowOpeningSoon is a daily update window that opens at the start of
// the minute minutes from now (at least minutes-1 away) and stays open for
// 30 minutes (or until midnight).
func windowOpeningSoon(minutes int) (time.Time, string) {
	opens := time.Now().UTC().Truncate(time.Minute).Add(time.Duration(minutes) * time.Minute)
	end := opens.Add(30 * time.Minute)
	endText := end.Format("15:04")
	if midnight := opens.Truncate(24 * time.Hour).Add(24 * time.Hour); !end.Before(midnight) {
		endText = "24:00"
	}
	return opens, fmt.Sprintf("daily %s-%s UTC", opens.Format("15:04"), endText)
}

// An offer the customer's window deferred applies when the window opens
// only once imsd confirms it still stands: an agent cut off from imsd
// (imsd stopped here) when its window opens applies nothing, however
// long it waits; once imsd is back, the agent asks, imsd reads the offer
// from its store and sends it again, and the agent applies it (and the
// new version confirms). Before, the agent applied it on its own clock,
// so a withdrawal it could not hear was overtaken. A second install's
// deferred offer, taken back with byoc agent update --withdraw, is
// dropped and never applied.
func TestDeferredOfferWaitsForIMSDAtWindowOpen(t *testing.T) {
	t.Parallel() // mostly waiting for the window, as the other window test
	rig := startAgentRig(t, "v1.4.0", "v1.5.0")
	cli, agentOf := rig.cli, rig.agentOf
	v150 := rig.publishBuild(t, "v1.5.0", "v1.5.0")
	// Two agents to start, two offers and a withdrawal before it opens:
	// at least two minutes.
	opens, win := windowOpeningSoon(3)
	ag := rig.startAgent(t, "v1.4.0", "shop", "cutoff", "--allow", ">=1.4 <2", "--window", win)
	back := rig.startAgent(t, "v1.4.0", "shop", "taken-back", "--allow", ">=1.4 <2", "--window", win)
	offers := map[string]string{}
	for _, n := range []string{"cutoff", "taken-back"} {
		cluster.Eventually(t, 60*time.Second, n+"'s agent to report its update policy", func() bool {
			a := agentOf(n)
			return a.GetConnected() && a.GetUpdate().GetMode() == "allow" && a.GetUpdate().GetWindow() != ""
		})
		cli.Run(0, "agent", "update", n, "--release", v150)
		cluster.Eventually(t, 60*time.Second, n+"'s agent to defer the offer to its window", func() bool {
			a := agentOf(n)
			return a.GetUpdate().GetLastKind() == "deferred" && a.GetUpdate().GetLastOfferId() == a.GetUpdateOffer().GetId()
		})
		offers[n] = agentOf(n).GetUpdateOffer().GetId()
	}
	offer := offers["cutoff"]
	out := cli.Run(0, "agent", "update", "taken-back", "--withdraw", "--reason", "wrong build")
	if !strings.Contains(out, "Withdrew offer "+offers["taken-back"]) || !strings.Contains(out, "never applied") {
		t.Fatalf("agent update --withdraw: %s", out)
	}
	cluster.Eventually(t, 60*time.Second, "the agent to drop the offer taken back", func() bool {
		a := agentOf("taken-back")
		return a.GetUpdate().GetLastKind() == "withdrawn" && a.GetUpdate().GetLastOfferId() == offers["taken-back"]
	})
	if get := cli.Run(0, "install", "get", "taken-back"); !strings.Contains(get, "withdrawn by") || !strings.Contains(get, "wrong build") {
		t.Fatalf("install get lacks the withdrawal:\n%s", get)
	}
	rig.ims.Stop()
	if time.Now().After(opens.Add(-5 * time.Second)) {
		t.Fatalf("imsd stopped too late, after the window %s opened: the test proves nothing", win)
	}

	// The window opens with imsd unreachable: nothing is applied.
	time.Sleep(time.Until(opens.Add(25 * time.Second)))
	if b, _ := exec.Command(filepath.Join(ag.bin, "agentd"), "--version").Output(); !strings.Contains(string(b), " v1.4.0 ") {
		t.Fatalf("the agent applied the deferred offer while cut off from imsd: %s\n%s", b, ag.proc.Output())
	}
	if logs := ag.proc.Output(); strings.Contains(logs, "agent update offer applied") || !strings.Contains(logs, "asking imsd to confirm the deferred agent update") {
		t.Fatalf("the agent's log:\n%s", logs)
	}

	// imsd is back: confirmed, applied, and the new version confirms.
	rig.ims.Restart(t)
	cluster.Eventually(t, 120*time.Second, "the agent to apply the confirmed offer and run v1.5.0", func() bool {
		a := agentOf("cutoff")
		return a.GetConnected() && a.GetVersion() == "v1.5.0" && a.GetUpdate().GetLastOfferId() == offer &&
			a.GetUpdate().GetLastKind() == "confirmed"
	})
	if logs := ag.proc.Output(); !strings.Contains(logs, "agent update offer applied") {
		t.Fatalf("the agent's log:\n%s", logs)
	}
	// Back too (after its own reconnect backoff), still on v1.4.0.
	cluster.Eventually(t, 90*time.Second, "the agent whose offer was taken back to reconnect", func() bool {
		return agentOf("taken-back").GetConnected()
	})
	a := agentOf("taken-back")
	if a.GetVersion() != "v1.4.0" || a.GetUpdate().GetLastKind() != "withdrawn" {
		t.Fatalf("the offer taken back: version %s, connected %v, last %s\n%s", a.GetVersion(), a.GetConnected(), a.GetUpdate().GetLastKind(), back.proc.Output())
	}
	if b, _ := exec.Command(filepath.Join(back.bin, "agentd"), "--version").Output(); !strings.Contains(string(b), " v1.4.0 ") {
		t.Fatalf("the agent whose offer was taken back changed its binary: %s", b)
	}
}
