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
	rig := startAgentRig(t, "v1.4.0", "v1.5.0")
	cli, agentOf := rig.cli, rig.agentOf
	v150 := rig.publishBuild(t, "v1.5.0", "v1.5.0")

	// The window opens at the start of the minute after next: at least
	// a minute to defer, cancel and withdraw before it does.
	now := time.Now().UTC()
	opens := now.Truncate(time.Minute).Add(2 * time.Minute)
	end := opens.Add(30 * time.Minute)
	endText := end.Format("15:04")
	if midnight := opens.Truncate(24 * time.Hour).Add(24 * time.Hour); !end.Before(midnight) {
		endText = "24:00"
	}
	win := fmt.Sprintf("daily %s-%s UTC", opens.Format("15:04"), endText)
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
