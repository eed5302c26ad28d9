package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// A job no agent can take says why, in words an operator can act on.
func TestPendingReason(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, tok := cluster.NewInstall(t, c, "shop", "alpha")
	reason := func(id string) string {
		t.Helper()
		r, err := c.GetJob(context.Background(), connect.NewRequest(&imsv1.GetJobRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Job.PendingReason
	}

	first := enqueue(t, c, "alpha", "true", 60)
	if r := reason(first.Id); !strings.Contains(r, "no agent has enrolled") {
		t.Fatalf("pending reason without an agent: %q", r)
	}
	a := cluster.EnrollRaw(t, ims.URL(), tok)
	if r := reason(first.Id); !strings.Contains(r, "never connected") {
		t.Fatalf("pending reason with an enrolled, never connected agent: %q", r)
	}
	a.Connect(t, 1)
	as := a.Assignment(t)
	if r := reason(as.JobId); !strings.Contains(r, "assigned to agent "+a.ID) {
		t.Fatalf("pending reason of an assigned job: %q", r)
	}
	a.Answer(t, a.Send(t, cluster.Ack(as.JobId, as.FencingToken)))
	second := enqueue(t, c, "alpha", "true", 60)
	if r := reason(second.Id); !strings.Contains(r, "busy") {
		t.Fatalf("pending reason behind a busy agent: %q", r)
	}
	a.Close()
	cluster.Eventually(t, 10*time.Second, "the agent to count as disconnected", func() bool {
		return strings.Contains(reason(second.Id), "not connected")
	})
	if r := reason(second.Id); !strings.Contains(r, "last seen") {
		t.Fatalf("pending reason with a gone agent: %q", r)
	}
}
