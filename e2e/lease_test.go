package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/byoc-dev/byoc/e2e/cluster"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// A killed agent's lease runs out; a new agent runs the job as attempt 2.
func TestKilledAgentJobRerunsAsAttempt2(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, token := cluster.NewInstall(t, c, "shop", "acme")
	first := cluster.StartAgent(t, ims.URL(), token, filepath.Join(t.TempDir(), "a1"))
	waitConnected(t, ims, "acme")

	mark := marker()
	job := enqueue(t, c, "acme", `echo "attempt $BYOC_ATTEMPT"; if [ "$BYOC_ATTEMPT" = 1 ]; then sleep `+mark+`; fi; echo done`, 120)
	ps := waitPIDs(t, mark, 1)
	cluster.Eventually(t, 10*time.Second, "attempt 1's line to reach imsd", func() bool {
		for _, l := range cluster.Logs(t, c, job.Id) {
			if l.Text == "attempt 1" {
				return true
			}
		}
		return false
	})
	first.Kill()
	// The plugin dies with its agent (parent-death signal), and its script with it.
	cluster.Eventually(t, 5*time.Second, "the killed agent's job processes to exit", func() bool { return !alive(ps[0]) })

	// A replacement agent for the same install.
	tok, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, ims.URL(), tok.Msg.EnrollmentToken.Token, filepath.Join(t.TempDir(), "a2"))

	lines, end := follow(t, c, job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Attempt != 2 {
		t.Fatalf("job ended %v on attempt %d (%s); want succeeded on attempt 2", end.State, end.Attempt, end.Error)
	}
	var a1, a2 []string
	for _, l := range lines {
		if l.Stream == imsv1.LogStream_LOG_STREAM_SYSTEM {
			continue
		}
		if l.Attempt == 1 {
			a1 = append(a1, l.Text)
		} else {
			a2 = append(a2, l.Text)
		}
	}
	if !slices.Equal(a1, []string{"attempt 1"}) || !slices.Equal(a2, []string{"attempt 2", "done"}) {
		t.Fatalf("attempt 1 lines %q, attempt 2 lines %q", a1, a2)
	}
}

// An agent that went silent loses its lease; when it comes back its writes
// under the old fencing token are refused and change nothing.
func TestStaleWriterIsRefused(t *testing.T) {
	skipShort(t)
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, token := cluster.NewInstall(t, c, "shop", "acme")
	zombie := cluster.EnrollRaw(t, ims.URL(), token)
	zombie.Connect(t, 1)

	job := enqueue(t, c, "acme", `echo "attempt $BYOC_ATTEMPT"`, 60)
	as := zombie.Assignment(t)
	if as.JobId != job.Id || as.Attempt != 1 {
		t.Fatalf("assignment %s attempt %d, want %s attempt 1", as.JobId, as.Attempt, job.Id)
	}
	if m := zombie.Answer(t, zombie.Send(t, cluster.Ack(as.JobId, as.FencingToken))); m.GetAccepted() == nil {
		t.Fatalf("ack refused: %v", m)
	}
	if m := zombie.Answer(t, zombie.Send(t, cluster.Logs1(as.JobId, as.FencingToken, 1, "zombie line 1"))); m.GetAccepted() == nil {
		t.Fatalf("log refused: %v", m)
	}
	// Go silent: no heartbeats. The lease expires and the job is requeued.
	zombie.Close()
	cluster.WaitJob(t, c, job.Id, 20*time.Second, imsv1.JobState_JOB_STATE_QUEUED)

	tok, err := c.CreateEnrollmentToken(context.Background(), connect.NewRequest(&imsv1.CreateEnrollmentTokenRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	cluster.StartAgent(t, ims.URL(), tok.Msg.EnrollmentToken.Token, filepath.Join(t.TempDir(), "a2"))
	end := cluster.WaitJob(t, c, job.Id, 30*time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if end.Attempt != 2 {
		t.Fatalf("attempt = %d, want 2", end.Attempt)
	}

	// The zombie comes back and re-attaches: imsd says the job is lost.
	w := zombie.Connect(t, 1, &agentv1.RunningJob{JobId: as.JobId, FencingToken: as.FencingToken})
	if !slices.Contains(w.Lost, as.JobId) {
		t.Fatalf("welcome lost = %v, want %s", w.Lost, as.JobId)
	}
	// Its late writes are refused with a clear terminal error.
	for name, m := range map[string]*agentv1.ConnectRequest{
		"logs":   cluster.Logs1(as.JobId, as.FencingToken, 2, "zombie line 2"),
		"result": cluster.Result(as.JobId, as.FencingToken, agentv1.Outcome_OUTCOME_FAILED, 9),
		"ack":    cluster.Ack(as.JobId, as.FencingToken),
	} {
		r := zombie.Answer(t, zombie.Send(t, m)).GetRejected()
		if r == nil {
			t.Fatalf("late %s was accepted", name)
		}
		if r.Code != connect.CodeFailedPrecondition.String() || !strings.Contains(r.Message, "already ended") && !strings.Contains(r.Message, "stale fencing token") {
			t.Fatalf("late %s refused with %s %q; want failed_precondition naming the stale token", name, r.Code, r.Message)
		}
	}
	after := cluster.WaitJob(t, c, job.Id, time.Second, imsv1.JobState_JOB_STATE_SUCCEEDED)
	if after.ExitCode != 0 || after.Attempt != 2 {
		t.Fatalf("job changed by a stale write: %v", after)
	}
	for _, l := range cluster.Logs(t, c, job.Id) {
		if l.Text == "zombie line 2" {
			t.Fatal("a stale log line was stored")
		}
	}
}

// imsd restarts while a job runs: the agent reconnects, re-attaches, the job
// completes and no line is lost or duplicated.
func TestIMSRestartMidJob(t *testing.T) {
	skipShort(t)
	opts := fast
	opts.LeaseDuration = 10 * time.Second
	ims := cluster.StartIMS(t, opts)
	startAgent(t, ims, "acme")
	c := ims.Admin()
	const n = 40
	job := enqueue(t, c, "acme", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep 0.05; done`, n), 120)
	cluster.Eventually(t, 30*time.Second, "the job to log a few lines", func() bool { return len(cluster.Logs(t, c, job.Id)) > 5 })
	ims.Restart(t)
	c = ims.Admin()

	lines, end := follow(t, c, job.Id)
	if end.State != imsv1.JobState_JOB_STATE_SUCCEEDED || end.Attempt != 1 {
		t.Fatalf("job ended %v on attempt %d (%s); want succeeded on attempt 1 (re-attached)", end.State, end.Attempt, end.Error)
	}
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	if got := cluster.Texts(lines); !slices.Equal(got, want) {
		t.Fatalf("after the restart the log is\n%q\nwant\n%q", got, want)
	}
}

// A job cancelled while its agent is disconnected is cancelled on the
// agent when it re-attaches.
func TestCancelReachesAReconnectingAgent(t *testing.T) {
	ims := cluster.StartIMS(t, fast)
	c := ims.Admin()
	_, token := cluster.NewInstall(t, c, "shop", "acme")
	a := cluster.EnrollRaw(t, ims.URL(), token)
	a.Connect(t, 1)
	job := enqueue(t, c, "acme", "sleep 300", 60)
	as := a.Assignment(t)
	a.Answer(t, a.Send(t, cluster.Ack(as.JobId, as.FencingToken)))
	a.Close()
	cluster.Eventually(t, 10*time.Second, "the agent to drop off", func() bool { return ims.Hub().Count() == 0 })
	if _, err := c.CancelJob(context.Background(), connect.NewRequest(&imsv1.CancelJobRequest{Id: job.Id, Reason: "while away"})); err != nil {
		t.Fatal(err)
	}
	// The install's chain names who asked (issue 33: it was empty).
	me, err := c.WhoAmI(context.Background(), connect.NewRequest(&imsv1.WhoAmIRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := c.ListAuditEvents(context.Background(), connect.NewRequest(&imsv1.ListAuditEventsRequest{Install: "acme"}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs.Msg.Events {
		if ev.Kind == "job.cancel_requested" && ev.Subject == "job:"+job.Id {
			found = true
			if ev.Actor != me.Msg.Name {
				t.Errorf("job.cancel_requested actor %q, want the token's name %q", ev.Actor, me.Msg.Name)
			}
		}
	}
	if !found {
		t.Error("no job.cancel_requested in acme's chain")
	}
	w := a.Connect(t, 1, &agentv1.RunningJob{JobId: as.JobId, FencingToken: as.FencingToken})
	if !slices.Contains(w.Reattached, as.JobId) {
		t.Fatalf("welcome reattached = %v", w.Reattached)
	}
	for {
		m, err := a.Next(t, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cn := m.GetCancel(); cn != nil {
			if cn.JobId != as.JobId || cn.Reason != "while away" {
				t.Fatalf("cancel = %v", cn)
			}
			return
		}
	}
}
