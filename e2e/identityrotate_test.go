package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/rpc/agentchannel"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1/agentv1connect"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// agentd identity rotate on a live agent with a job running: the agent
// announces its next key to imsd, re-signs the customer's control files,
// reconnects under the new key (no re-enrolment) and runs jobs; the job
// that ran across the rotation finishes once; a connection presenting
// the old key is refused; both sides audit the rotation.
func TestAgentIdentityRotate(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	ag := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	old, err := identity.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	// The customer's controls, signed with the old key.
	permissions(t, state, "disable", "deprovision")

	// A job that runs across the rotation (an action's steps see no host
	// directory to gate it on: it runs for a while; the rotation takes
	// about one look at the state dir, a second).
	long := enqueue(t, ims.Admin(), "acme", `echo started; sleep 10; echo finished`, 120)
	cluster.Eventually(t, 30*time.Second, "the long job to run", func() bool {
		r, err := ims.Admin().GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: long.Id}))
		return err == nil && r.Msg.Job.State == imsv1.JobState_JOB_STATE_RUNNING
	})

	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "agentd"), "identity", "--state-dir", state, "rotate", "--wait", "60s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Rotated: the agent's key is") {
		t.Fatalf("agentd identity rotate --wait: %v\n%s\nagentd:\n%s", err, out, ag.Output())
	}
	if r, err := ims.Admin().GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: long.Id})); err != nil ||
		r.Msg.Job.State != imsv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("the job is not running across the rotation (the rotation took longer than the job?): %v %v", r, err)
	}
	cur, err := identity.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if cur.AgentID != old.AgentID || cur.PrivateKey.Equal(old.PrivateKey) || len(cur.PreviousKeyIDs) != 1 ||
		cur.PreviousKeyIDs[0] != identity.KeyIDOf(old.PrivateKey) {
		t.Fatalf("identity after the rotation: agent %s (was %s), previous %v", cur.AgentID, old.AgentID, cur.PreviousKeyIDs)
	}
	if _, err := os.Stat(filepath.Join(state, identity.RotationFileName)); !os.IsNotExist(err) {
		t.Fatalf("%s left after the rotation: %v", identity.RotationFileName, err)
	}
	// imsd promotes the new key at the agent's first hello under it.
	cli := cluster.NewCLI(t, ims)
	cluster.Eventually(t, 30*time.Second, "imsd to record the rotation", func() bool {
		return lineWith(cli.Run(0, "audit", "list", "--install", "acme"), "agent.key_rotated")
	})
	if out := cli.Run(0, "audit", "list", "--install", "acme"); !lineWith(out, "agent.key_rotation_started") {
		t.Fatalf("byoc audit list:\n%s", out)
	}
	waitConnected(t, ims, "acme")
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Agent key", identity.KeyIDOf(cur.PrivateKey), "rotated") {
		t.Fatalf("byoc install get:\n%s", out)
	}

	// The control files verify with the new key, as the customer left them.
	if out := permissions(t, state, "verify"); strings.Contains(out, "refused") {
		t.Fatalf("agentd permissions verify:\n%s", out)
	}
	if out := permissions(t, state, "show"); !lineWith(out, "deprovision", "off") {
		t.Fatalf("agentd permissions show:\n%s", out)
	}

	// The job that ran across the rotation ends once; a new one runs.
	if lines, end := follow(t, ims.Admin(), long.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Attempt != 1 || !hasLine(lines, "finished") {
		for _, l := range lines {
			t.Log(l.Text)
		}
		t.Fatalf("the job across the rotation ended %v, attempt %d (%s)", end.State, end.Attempt, end.Error)
	}
	job := enqueue(t, ims.Admin(), "acme", `echo after rotation`, 60)
	if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("a job after the rotation ended %v (%s)", end.State, end.Error)
	}

	// The old key is refused: a channel opened with it does not verify.
	c := agentv1connect.NewAgentServiceClient(agent.DefaultHTTPClient(), ims.URL())
	st := c.Connect(context.Background())
	defer st.CloseRequest()
	st.Send(nil)
	m, err := st.Receive()
	if err != nil {
		t.Fatal(err)
	}
	ch := m.GetChallenge()
	_, err = agentchannel.Dial(st, ch, old.PrivateKey, old.AgentID, nil, &agentv1.Hello{AgentId: old.AgentID, Capacity: 1,
		Signature: agentproto.SignChallenge(old.PrivateKey, old.AgentID, ch.Nonce)})
	wantCode(t, err, connect.CodeUnauthenticated, "bad signature")
	// The agent's journal records it.
	if o := ag.Output(); !strings.Contains(o, "the agent's key rotated; reconnecting under the new key") {
		t.Fatalf("agentd's output:\n%s", o)
	}
	rs, err := auditlog.ReadFile(filepath.Join(auditlog.Dir(state), auditlog.AgentFile))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range rs {
		kinds[r.Kind]++
	}
	if kinds[agent.KindKeyRotationPending] != 1 || kinds[agent.KindKeyRotated] != 1 {
		t.Fatalf("the agent's journal: %v", kinds)
	}
}

func hasLine(lines []*imsv1.LogLine, s string) bool {
	for _, l := range lines {
		if strings.Contains(l.Text, s) {
			return true
		}
	}
	return false
}

// agentd identity revoke, on the customer's side, of a live agent: imsd
// is told (signed with the agent's key), refuses the agent and audits it
// with the customer as actor; the agent stops; it does not start again on
// its state dir, whose keys are erased.
func TestCustomerRevokesAgent(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	ag := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	// Final, so it asks for --yes.
	if out, err := exec.Command(agentd, "identity", "--state-dir", state, "revoke").CombinedOutput(); err == nil || !strings.Contains(string(out), "pass --yes") {
		t.Fatalf("agentd identity revoke without --yes: %v\n%s", err, out)
	}
	out, err := exec.Command(agentd, "identity", "--state-dir", state, "revoke", "--yes", "--reason", "contract ended").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "imsd refuses it from now on") {
		t.Fatalf("agentd identity revoke: %v\n%s", err, out)
	}
	cluster.Eventually(t, 30*time.Second, "the revoked agent to stop", ag.Exited)
	if o := ag.Output(); !strings.Contains(o, "revoked") {
		t.Fatalf("agentd's output:\n%s", o)
	}
	// The customer's call, made by the command's own process, is in
	// the egress ledger beside the agent's messages.
	if out, err := exec.Command(agentd, "egress", "--state-dir", state, "list").CombinedOutput(); err != nil || !lineWith(string(out), "revoke_self") || !lineWith(string(out), "hello") {
		t.Fatalf("agentd egress list: %v\n%s", err, out)
	}
	cli := cluster.NewCLI(t, ims)
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Agent revoked", "revoked by the customer: contract ended") {
		t.Fatalf("byoc install get:\n%s", out)
	}
	if out := cli.Run(0, "audit", "list", "--install", "acme"); !lineWith(out, "agent.revoked", "customer:") {
		t.Fatalf("byoc audit list:\n%s", out)
	}
	// It never starts again on this state dir.
	again := exec.Command(agentd, "--ims", ims.URL(), "--state-dir", state)
	if out, err := again.CombinedOutput(); err == nil || !strings.Contains(string(out), "revoked by the customer") || !strings.Contains(string(out), "enrol a new agent") {
		t.Fatalf("agentd on the revoked state dir: %v\n%s", err, out)
	}
	if out, err := exec.Command(agentd, "identity", "--state-dir", state, "revoke", "--yes").CombinedOutput(); err != nil || !strings.Contains(string(out), "Already revoked") {
		t.Fatalf("a second revoke: %v\n%s", err, out)
	}
}

// The customer revokes their agent after its state dir was copied, while
// imsd cannot be reached: the keys are erased here, and the call signed
// before (kept in revoked.json) reaches imsd when the command runs again
// once imsd is reachable; the copy is then refused. Before, the key was
// gone and imsd could never be told by the customer: the copy kept
// connecting as the agent.
func TestCustomerRevokesAgentWhileIMSDUnreachable(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	ag := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	ag.Stop()
	// The thief's copy, made before the revocation.
	stolen := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(stolen, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(state, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stolen, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	agentd := filepath.Join(cluster.Binaries(t), "agentd")
	out, err := exec.Command(agentd, "identity", "--state-dir", state, "--ims", "http://127.0.0.1:1", "revoke", "--yes", "--reason", "disk stolen").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "could not be told") || !strings.Contains(string(out), "Run this command again") {
		t.Fatalf("agentd identity revoke, imsd unreachable: %v\n%s", err, out)
	}
	// Once imsd is reachable: the same command tells it.
	out, err = exec.Command(agentd, "identity", "--state-dir", state, "revoke", "--yes").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Told imsd of the revocation") {
		t.Fatalf("agentd identity revoke again, imsd reachable: %v\n%s", err, out)
	}
	cli := cluster.NewCLI(t, ims)
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Agent revoked", "revoked by the customer: disk stolen") {
		t.Fatalf("byoc install get:\n%s", out)
	}
	if out, err := exec.Command(agentd, "identity", "--state-dir", state, "revoke", "--yes").CombinedOutput(); err != nil || !strings.Contains(string(out), "Already revoked") {
		t.Fatalf("a third revoke: %v\n%s", err, out)
	}
	// The copy gets nowhere.
	thief := cluster.StartAgent(t, ims.URL(), "", stolen)
	cluster.Eventually(t, 30*time.Second, "the stolen copy to stop, refused", thief.Exited)
	if o := thief.Output(); !strings.Contains(o, "was revoked") {
		t.Fatalf("the stolen copy's output:\n%s", o)
	}
}
