package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// byoc agent revoke: the connected agent's stream ends, its next hello is
// refused with imsd's signed refusal and it stops for good, saying why;
// the revocation is audited and shown; a new agent enrols and runs jobs.
func TestAgentRevoke(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	_, token := cluster.NewInstall(t, ims.Admin(), "shop", "acme")
	ag := cluster.StartAgent(t, ims.URL(), token, filepath.Join(t.TempDir(), "agent"))
	waitConnected(t, ims, "acme")
	cli := cluster.NewCLI(t, ims)
	out := cli.Run(0, "agent", "revoke", "acme", "--reason", "host compromised")
	if !strings.Contains(out, "Revoked agent agt_") {
		t.Fatalf("byoc agent revoke:\n%s", out)
	}
	cluster.Eventually(t, 30*time.Second, "the revoked agent to stop", ag.Exited)
	if o := ag.Output(); !strings.Contains(o, "imsd refused this agent's identity") || !strings.Contains(o, "was revoked (host compromised)") {
		t.Fatalf("agentd's output:\n%s", o)
	}
	if out := cli.Run(0, "install", "get", "acme"); !lineWith(out, "Agent", "revoked") || !lineWith(out, "Agent revoked", "host compromised") {
		t.Fatalf("byoc install get:\n%s", out)
	}
	if out := cli.Run(0, "audit", "list", "--install", "acme"); !lineWith(out, "agent.revoked") {
		t.Fatalf("byoc audit list:\n%s", out)
	}
	// Nothing left to revoke; a new agent enrols and works.
	cli.Run(1, "agent", "revoke", "acme", "--reason", "again")
	tok, err := ims.Admin().CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, ims.URL(), tok.Msg.EnrollmentToken.Token, filepath.Join(t.TempDir(), "agent2"))
	waitConnected(t, ims, "acme")
	job := enqueue(t, ims.Admin(), "acme", `echo new agent`, 60)
	if _, end := follow(t, ims.Admin(), job.Id); end.State != imsv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the new agent's job ended %v (%s)", end.State, end.Error)
	}
}
