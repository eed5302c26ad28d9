package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/agentd/agent"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/e2e/cluster"
	"github.com/byoc-dev/byoc/imsd/server"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// A job runs end to end under imsd's signature: the enrolment token
// carries the signing key's fingerprint, the agent keeps that key, and
// records the attempt it ran in its replay record.
func TestSignedJobRunsEndToEnd(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	key := ims.SigningKey()
	if fi, err := os.Stat(filepath.Join(ims.DataDir, server.SigningKeyFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing key file: %v, %v", fi, err)
	}
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	if !strings.HasSuffix(token, "."+key.ID) {
		t.Fatalf("enrolment token %q does not end with the signing key's id %s", token, key.ID)
	}
	state := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	id, err := identity.Load(state)
	if err != nil || len(id.IMSDKeys) != 1 || !id.IMSDKeys[0].Equal(key.Public) {
		t.Fatalf("the agent keeps %v (%v), want imsd's key", id.IMSDKeys, err)
	}

	job := enqueue(t, ims.Admin(), "acme", `echo signed`, 60)
	_, end := follow(t, ims.Admin(), job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %v (%s), want succeeded", end.State, end.Error)
	}
	seen, err := os.ReadFile(filepath.Join(state, agent.SeenFileName))
	if err != nil || !strings.Contains(string(seen), ` 1 "`+job.Id+`"`) {
		t.Fatalf("replay record %q (%v) does not hold attempt 1 of %s", seen, err, job.Id)
	}
}

// Jobs one batch enqueue hands to a real agentd (capacity 4) at once are
// signed with one batch signature (the agent's hello says it verifies
// them): the agent verifies each job's proof and the root's signature,
// runs all three and records each attempt in its replay record.
func TestBatchSignedJobsRunEndToEnd(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	state := filepath.Join(t.TempDir(), "agent")
	cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	// One job first, run to its end: the agent is then surely taking
	// jobs on this stream (shown connected, its stream may not be ready
	// for a hand-over at enqueue yet on a loaded machine).
	warm := enqueue(t, ims.Admin(), "acme", `true`, 60)
	if _, end := follow(t, ims.Admin(), warm.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the first job ended %v (%s)", end.State, end.Error)
	}
	req := &imsv1.EnqueueJobsRequest{}
	for range 3 {
		req.Jobs = append(req.Jobs, &imsv1.EnqueueJobRequest{Install: "acme", ComponentType: "action", Operation: "apply",
			Config: actionConfig(t, "echo batch"), TimeoutSeconds: 60})
	}
	r, err := ims.Admin().EnqueueJobs(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range r.Msg.Jobs {
		if j.State != imsv1.JobState_JOB_STATE_ASSIGNED {
			t.Fatalf("job %s stored %v, want handed to the connected agent at enqueue", j.Id, j.State)
		}
		if _, end := follow(t, ims.Admin(), j.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %s ended %v (%s), want succeeded", j.Id, end.State, end.Error)
		}
	}
	seen, err := os.ReadFile(filepath.Join(state, agent.SeenFileName))
	for _, j := range r.Msg.Jobs {
		if err != nil || !strings.Contains(string(seen), ` 1 "`+j.Id+`"`) {
			t.Fatalf("replay record %q (%v) does not hold attempt 1 of %s", seen, err, j.Id)
		}
	}
}

// An enrolment whose server answers with a key other than the one the
// token names is refused, and nothing is saved; a token without a
// fingerprint is refused before it is spent.
func TestEnrolmentWithWrongFingerprintIsRefused(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	secret, _, _ := strings.Cut(token, ".")

	// Without a fingerprint: refused by the agent, the token unspent.
	state := filepath.Join(t.TempDir(), "agent")
	p := cluster.StartAgent(t, ims.URL(), secret, state)
	waitExit(t, p, "carries no fingerprint")

	// With another key's fingerprint (as if a server in the middle had
	// swapped the key): refused, no identity kept.
	otherPub, _, _ := ed25519.GenerateKey(nil)
	p = cluster.StartAgent(t, ims.URL(), secret+"."+agentproto.KeyID(otherPub), state)
	waitExit(t, p, "is not the one the enrolment token names")
	if _, err := identity.Load(state); err != identity.ErrNotEnrolled {
		t.Fatalf("an identity was saved after a refused enrolment: %v", err)
	}
	// That token was spent at imsd (the agent learns the key only from
	// the answer): the operator issues a new one.
	r, err := ims.Admin().CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, ims.URL(), r.Msg.EnrollmentToken.Token, state)
	waitConnected(t, ims, "acme")
}

// An agent refuses an imsd whose key it does not know (here: imsd
// restarted with another key): it opens no channel to it, so it takes no
// job from it (the job stays queued), and it logs why at ERROR. (Before
// the channel, the agent connected and refused each job: signed jobs
// still refuse one signed by an unknown key, TestAgentRefusesUnverifiedAssignments.)
func TestJobSignedByAnUnknownKeyIsRefused(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	state := filepath.Join(t.TempDir(), "agent")
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	p := cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	addr, dir := ims.Addr(), ims.DataDir
	ims.Stop()

	_, other, _ := ed25519.GenerateKey(nil)
	der, _ := x509.MarshalPKCS8PrivateKey(other)
	keyFile := filepath.Join(t.TempDir(), "other.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	o := fast
	o.DataDir, o.Addr, o.SigningKeyFile = dir, addr, keyFile
	ims = cluster.StartIMS(t, o)
	// The stopped imsd recorded the stream's end: the agent shows gone at
	// once, not for the last-seen window after its last message.
	notConnected := func(when string) {
		t.Helper()
		r, err := ims.Admin().GetInstall(context.Background(), connect.NewRequest(&imsv1.GetInstallRequest{IdOrName: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		if r.Msg.Install.Agent != nil && r.Msg.Install.Agent.Connected {
			t.Fatalf("%s: the agent shows connected to an imsd whose key it does not trust", when)
		}
	}
	notConnected("at once after the restart")
	job := enqueue(t, ims.Admin(), "acme", `echo must not run`, 60)
	// Two refusals: the agent tried again and refused again.
	cluster.Eventually(t, 20*time.Second, "the agent's ERROR lines", func() bool {
		return strings.Count(p.Output(), `level=ERROR msg="refusing the server at imsd's URL`) >= 2
	})
	if !strings.Contains(p.Output(), "which this agent does not trust") {
		t.Fatalf("the agent's refusal does not say why:\n%s", p.Output())
	}
	notConnected("after two refusals")
	j, err := ims.Admin().GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: job.Id}))
	if err != nil {
		t.Fatal(err)
	}
	if j.Msg.Job.State != imsv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("job is %v, want queued: no agent took it", j.Msg.Job.State)
	}
}

// waitExit waits for an agent process to exit, its output holding want.
func waitExit(t *testing.T, p *cluster.AgentProc, want string) {
	t.Helper()
	cluster.Eventually(t, 30*time.Second, "agentd to exit", p.Exited)
	if out := p.Output(); !strings.Contains(out, want) {
		t.Fatalf("agentd's output does not say %q:\n%s", want, out)
	}
}

// imsd keys rotate: after a restart imsd signs with the new key; the
// connected agent learns it through the welcome's chain and runs jobs,
// and a token issued before the rotation still enrols a new agent.
func TestKeyRotation(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	state := filepath.Join(t.TempDir(), "agent")
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	_, oldToken := cluster.NewInstall(t, ims.Admin(), "shop", "beta")
	cluster.StartAgent(t, ims.URL(), token, state)
	waitConnected(t, ims, "acme")
	oldID := ims.SigningKey().ID
	addr, dir := ims.Addr(), ims.DataDir
	ims.Stop()

	out, err := exec.Command(filepath.Join(cluster.Binaries(t), "imsd"), "keys", "rotate", "--data-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), oldID+" -> ") {
		t.Fatalf("imsd keys rotate: %v\n%s", err, out)
	}
	o := fast
	o.DataDir, o.Addr = dir, addr
	ims = cluster.StartIMS(t, o)
	if ims.SigningKey().ID == oldID {
		t.Fatal("imsd still signs with the old key")
	}
	waitConnected(t, ims, "acme")
	job := enqueue(t, ims.Admin(), "acme", `echo rotated`, 60)
	if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("after the rotation the job ended %v (%s)", end.State, end.Error)
	}
	id, err := identity.Load(state)
	if err != nil || len(id.IMSDKeys) != 2 {
		t.Fatalf("the agent keeps %d keys (%v), want the old and the new", len(id.IMSDKeys), err)
	}

	cluster.StartAgent(t, ims.URL(), oldToken, filepath.Join(t.TempDir(), "agent2"))
	waitConnected(t, ims, "beta")
	job = enqueue(t, ims.Admin(), "beta", `echo enrolled through the chain`, 60)
	if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the agent enrolled with a pre-rotation token: job ended %v (%s)", end.State, end.Error)
	}
}
