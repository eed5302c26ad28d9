package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// An agent rollout (issue 27) moves three install agents from v1.4.0 to
// v1.5.0 through the release machinery: the canary wave (one install)
// first, the other two once its agent confirmed the new version. A
// second rollout, of a bad release (its binaries are not the version it
// names: the agent's self-check fails), halts after the canary fails,
// and the other installs are never offered it; byoc agent rollout get
// shows it and imsd audits the halt and the canary's failure, with its
// cause.
func TestAgentRolloutCanaryThenRest(t *testing.T) {
	rig := startAgentRig(t, "v1.4.0", "v1.5.0")
	ims, cli, agentOf := rig.ims, rig.cli, rig.agentOf
	good := rig.publishBuild(t, "v1.5.0", "v1.5.0")
	bad := rig.publishBuild(t, "v1.5.1", "v1.5.0") // says v1.5.1, runs as v1.5.0

	names := []string{"a", "b", "c"}
	agents := map[string]*cluster.AgentProc{}
	for _, name := range names {
		agents[name] = rig.startAgent(t, "v1.4.0", "shop", name, "--allow", ">=1.4 <2", "--window", "daily 00:00-24:00 UTC").proc
	}
	cluster.Eventually(t, 60*time.Second, "the agents to report their update policy", func() bool {
		for _, n := range names {
			if a := agentOf(n); !a.GetConnected() || a.GetUpdate().GetMode() != "allow" || a.GetVersion() != "v1.4.0" {
				return false
			}
		}
		return true
	})
	var get func(id string) *imsv1.Release
	rollout := func(ref string) *imsv1.Release {
		t.Helper()
		var r struct{ ID string }
		out := cli.Run(0, "agent", "rollout", "create", "--release", ref, "--canary", "1", "--max-failures", "1", "--confirm-within", "3m", "-o", "json")
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID == "" {
			t.Fatalf("%v: %s", err, out)
		}
		return get(r.ID)
	}
	get = func(id string) *imsv1.Release {
		r, err := ims.Admin().GetRelease(context.Background(), connect.NewRequest(&imsv1.GetReleaseRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Release
	}
	stateOf := func(r *imsv1.Release) string {
		var s []string
		for _, in := range r.GetInstalls() {
			s = append(s, in.GetInstallName()+":"+in.GetState())
		}
		return strings.Join(s, " ")
	}

	// The good release: the canary first, the rest after it confirmed.
	r := rollout(good)
	if r.GetKind() != "agent" || len(r.GetWaves()) != 2 || r.GetWaves()[0].GetSize() != 1 || r.GetWaves()[1].GetSize() != 2 {
		t.Fatalf("rollout: %v", r)
	}
	var sawCanaryAlone bool
	cluster.Eventually(t, 120*time.Second, "the canary to confirm v1.5.0", func() bool {
		g := get(r.GetId())
		if g.GetInstalls()[0].GetState() == "running" && g.GetInstalls()[1].GetState() == "pending" && g.GetInstalls()[2].GetState() == "pending" {
			sawCanaryAlone = true
		}
		return g.GetInstalls()[0].GetState() == "succeeded"
	})
	if !sawCanaryAlone {
		t.Error("never saw the canary offered alone")
	}
	if a := agentOf("a"); a.GetVersion() != "v1.5.0" || a.GetUpdate().GetLastKind() != "confirmed" {
		t.Fatalf("canary agent: %s %s", a.GetVersion(), a.GetUpdate().GetLastKind())
	}
	cluster.Eventually(t, 180*time.Second, "the rollout to succeed", func() bool {
		return get(r.GetId()).GetState() == imsv1.ReleaseState_RELEASE_STATE_SUCCEEDED
	})
	for _, n := range names {
		if a := agentOf(n); a.GetVersion() != "v1.5.0" || !a.GetConnected() {
			t.Errorf("agent %s: %s, connected %v", n, a.GetVersion(), a.GetConnected())
		}
		if agents[n].Exited() {
			t.Errorf("agent %s exited:\n%s", n, agents[n].Output())
		}
	}
	if out := cli.Run(0, "agent", "rollout", "list"); !strings.Contains(out, r.GetId()) || !strings.Contains(out, "succeeded") {
		t.Fatalf("agent rollout list:\n%s", out)
	}

	// The bad release: the canary's self-check fails; the rollout halts
	// although --max-failures 1 tolerates one; b and c are never offered.
	offered := map[string]string{}
	for _, n := range names[1:] {
		offered[n] = agentOf(n).GetUpdateOffer().GetId()
	}
	r2 := rollout(bad)
	cluster.Eventually(t, 120*time.Second, "the bad rollout to halt", func() bool {
		return get(r2.GetId()).GetState() == imsv1.ReleaseState_RELEASE_STATE_HALTED
	})
	g := get(r2.GetId())
	if stateOf(g) != "a:failed b:pending c:pending" || !strings.Contains(g.GetError(), "canary") ||
		!strings.Contains(g.GetInstalls()[0].GetError(), "is not version v1.5.1") {
		t.Fatalf("bad rollout: %s; %s; %s", stateOf(g), g.GetError(), g.GetInstalls()[0].GetError())
	}
	if a := agentOf("a"); a.GetVersion() != "v1.5.0" || a.GetUpdate().GetLastKind() != "failed" || a.GetUpdate().GetLastCause() != "self_check" {
		t.Fatalf("canary agent after the bad release: %s %s %s", a.GetVersion(), a.GetUpdate().GetLastKind(), a.GetUpdate().GetLastCause())
	}
	for _, n := range names[1:] {
		if id := agentOf(n).GetUpdateOffer().GetId(); id != offered[n] {
			t.Errorf("agent %s was offered the bad release (offer %s)", n, id)
		}
	}
	out := cli.Run(0, "agent", "rollout", "get", r2.GetId())
	for _, want := range []string{"halted", "Agent release", bad, "canary", "failed", "is not version v1.5.1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("agent rollout get lacks %q:\n%s", want, out)
		}
	}
	audit := cli.Run(0, "audit", "list", "-o", "json")
	for _, want := range []string{`"release.halted"`, `"agent.update_failed"`, `self_check`, `"release.install_failed"`} {
		if !strings.Contains(audit, want) {
			t.Fatalf("audit lacks %s", want)
		}
	}
}
