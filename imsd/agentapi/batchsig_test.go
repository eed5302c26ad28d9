package agentapi

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byoc-dev/byoc/imsd/dispatch"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// openBatch is open with the hello's batch_signatures set as given.
func (e *streamEnv) openBatch(t *testing.T, batch bool) *chanStream {
	t.Helper()
	cs := newChanStream()
	go func() { _ = e.svc.Serve(context.Background(), cs) }()
	ch := cs.next(t).GetChallenge()
	e.hello(t, cs, ch, &agentv1.Hello{
		AgentId: e.agent, Signature: agentproto.SignChallenge(e.key, e.agent, ch.Nonce), Capacity: 2, Instance: "inst-a", BatchSignatures: batch,
	})
	t.Cleanup(func() {
		select {
		case <-cs.closed:
		default:
			close(cs.closed)
		}
	})
	if cs.next(t).GetWelcome() == nil {
		t.Fatal("want a welcome")
	}
	return cs
}

// verifyAssignment checks as as the agent does (agentd/agent check) and
// returns its signature.
func (e *streamEnv) verifyAssignment(t *testing.T, as *agentv1.JobAssignment) *agentv1.JobSignature {
	t.Helper()
	b, _ := proto.Marshal(as)
	var got agentv1.JobAssignment
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	sig := got.GetSignature()
	d, _ := agentproto.ConfigDigest(got.GetConfig().AsMap())
	c := agentproto.JobClaims{KeyID: sig.KeyId, InstallID: "ins_1", AgentID: e.agent, JobID: got.JobId, Attempt: int64(got.Attempt), FencingToken: got.FencingToken,
		Mode: got.Mode, Component: got.Component, ComponentType: got.ComponentType, Operation: got.Operation, TimeoutSeconds: got.TimeoutSeconds,
		ConfigDigest: d, Expires: time.UnixMilli(sig.ExpireUnixMs)}
	keys := map[string]ed25519.PublicKey{sig.KeyId: e.svc.cfg.SigningKey.Public}
	var err error
	if sig.BatchSize > 0 {
		err = agentproto.VerifyJobBatch(keys, &c, sig.Signature, agentproto.JobBatchProof{Index: sig.BatchIndex, Size: sig.BatchSize, Path: sig.BatchProof}, e.clk.Now())
	} else {
		err = agentproto.VerifyJob(keys, &c, sig.Signature, e.clk.Now())
	}
	if err != nil {
		t.Fatalf("assignment of %s: %v", got.JobId, err)
	}
	return sig
}

func (e *streamEnv) queue(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := e.st.EnqueueJob(context.Background(), store.Job{ID: id, InstallID: "ins_1", ComponentType: "action", Operation: "apply",
			Config: []byte(`{"steps":[{"run":"x"}]}`), MaxAttempts: 3, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t"}); err != nil {
			t.Fatal(err)
		}
	}
}

// Jobs an agent claims together are signed together when its hello says it
// verifies batch signatures (one signature, a proof each, both verify as
// the agent checks them); an agent that does not say so (an older agentd)
// gets a signature of its own per job.
func TestClaimedJobsAreBatchSignedOnlyForAgentsThatSaySo(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprint("batch_signatures=", batch), func(t *testing.T) {
			e := newStreamEnv(t)
			e.queue(t, "job_1", "job_2")
			cs := e.openBatch(t, batch)
			s1 := e.verifyAssignment(t, cs.next(t).GetAssignment())
			s2 := e.verifyAssignment(t, cs.next(t).GetAssignment())
			switch {
			case batch && (s1.BatchSize != 2 || s2.BatchSize != 2 || string(s1.Signature) != string(s2.Signature) || s1.BatchIndex == s2.BatchIndex):
				t.Fatalf("want one batch signature of 2 jobs, got %v and %v", s1, s2)
			case !batch && (s1.BatchSize != 0 || s2.BatchSize != 0 || len(s1.BatchProof) != 0):
				t.Fatalf("an agent without batch_signatures got a batch signature: %v, %v", s1, s2)
			}
		})
	}
}

// Jobs an enqueue hands straight to agents (Hub.DeliverAll) are signed as
// one batch; one job alone keeps a single signature.
func TestHandedOverJobsAreBatchSigned(t *testing.T) {
	for _, n := range []int{2, 1} {
		t.Run(fmt.Sprint(n, " jobs"), func(t *testing.T) {
			e := newStreamEnv(t)
			cs := e.openBatch(t, true)
			hub := e.svc.hub
			var news []store.NewJob
			var sessions []*dispatch.Session
			for i := range n {
				// The claim the welcome starts takes every free slot
				// while it runs and gives back what it did not use: wait
				// for it.
				var sess *dispatch.Session
				for deadline := time.Now().Add(10 * time.Second); sess == nil; {
					if sess = hub.Reserve("ins_1"); sess == nil {
						if time.Now().After(deadline) {
							t.Fatal("no free slot reserved")
						}
						time.Sleep(time.Millisecond)
					}
				}
				sessions = append(sessions, sess)
				news = append(news, store.NewJob{Job: store.Job{ID: fmt.Sprintf("job_%d", i), InstallID: "ins_1", ComponentType: "action", Operation: "apply",
					Config: []byte(`{"steps":[{"run":"x"}]}`), MaxAttempts: 3, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t", State: store.JobQueued},
					AgentID: sess.AgentID, LeaseUntil: e.clk.Now().Add(testLease + testGrace)})
			}
			out, err := e.st.EnqueueJobs(context.Background(), news)
			if err != nil {
				t.Fatal(err)
			}
			var hs []dispatch.Handover
			for i, j := range out {
				if j.State != store.JobAssigned {
					t.Fatalf("job %s stored %s, want assigned", j.ID, j.State)
				}
				hs = append(hs, dispatch.Handover{Session: sessions[i], Job: j})
			}
			hub.DeliverAll(hs)
			for range n {
				sig := e.verifyAssignment(t, cs.next(t).GetAssignment())
				if want := uint64(n); n > 1 && sig.BatchSize != want || n == 1 && sig.BatchSize != 0 {
					t.Fatalf("%d jobs handed over: signature %v", n, sig)
				}
			}
		})
	}
}
