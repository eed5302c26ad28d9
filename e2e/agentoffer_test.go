package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
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

// An offer imsd sends while a job runs waits for the job: the agent
// applies it (swaps the binaries) but keeps running the old version
// until the job has ended and been reported (drain), then runs the new
// version in its own place; the job is neither killed nor run twice.
func TestAgentUpdateOfferDrainsRunningJob(t *testing.T) {
	rig := startAgentRig(t, "v1.4.0", "v1.5.0")
	c := rig.ims.Admin()
	v150 := rig.publishBuild(t, "v1.5.0", "v1.5.0")
	a := rig.startAgent(t, "v1.4.0", "shop-drain", "drain", "--allow", ">=1.4 <2", "--window", "daily 00:00-24:00 UTC")
	pid := a.proc.Cmd.Process.Pid
	job := enqueue(t, c, "drain", `sleep 10; echo ran-once`, 120)
	cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_RUNNING)
	if out := rig.cli.Run(0, "agent", "update", "drain", "--release", v150); !strings.Contains(out, "Offered") {
		t.Fatalf("agent update drain: %s", out)
	}
	swapped := func() bool {
		out, _ := exec.Command(filepath.Join(a.bin, "agentd"), "--version").Output()
		return strings.Contains(string(out), " v1.5.0 ")
	}
	cluster.Eventually(t, 60*time.Second, "the agent to apply the offer (swap its binaries)", swapped)
	// Applied while the job runs: the old version still serves it.
	if r, err := c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: job.Id})); err != nil || r.Msg.Job.State != imsv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("the job ended before the offer was applied (lengthen it): %v", err)
	}
	if ag := rig.agentOf("drain"); ag.GetVersion() != "v1.4.0" || a.proc.Exited() || a.proc.Cmd.Process.Pid != pid {
		t.Fatalf("the agent did not wait for its running job: version %s, exited %v\n%s", ag.GetVersion(), a.proc.Exited(), a.proc.Output())
	}
	done := cluster.WaitJob(t, c, job.Id, 60*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED, imsv1.JobState_JOB_STATE_FAILED)
	if done.State != imsv1.JobState_JOB_STATE_SUCCEEDED || done.GetAttempt() != 1 {
		t.Fatalf("the job across the offer: %v, attempt %d\n%s", done.State, done.GetAttempt(), a.proc.Output())
	}
	var ran int
	for _, l := range cluster.Logs(t, c, job.Id) {
		ran += strings.Count(l.Text, "ran-once")
	}
	if ran != 1 {
		t.Fatalf("the job's log says ran-once %d times", ran)
	}
	cluster.Eventually(t, 60*time.Second, "the agent to run v1.5.0 and confirm the update", func() bool {
		ag := rig.agentOf("drain")
		return ag.GetConnected() && ag.GetVersion() == "v1.5.0" && ag.GetUpdate().GetLastKind() == "confirmed"
	})
	out := a.proc.Output()
	if a.proc.Exited() || a.proc.Cmd.Process.Pid != pid || !strings.Contains(out, "drained; running the new version") {
		t.Fatalf("the agent did not run v1.5.0 in its own place after draining:\n%s", out)
	}
	// It drained first, then ran the new version.
	if i, j := strings.Index(out, "agent update applied: draining"), strings.Index(out, "drained; running the new version"); i < 0 || j < i {
		t.Fatalf("no drain in the agent's log:\n%s", out)
	}
}
