package agentapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/byoc-dev/byoc/imsd/store"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// An agent whose job floods its log past the cap has every batch
// accepted (so it neither resends nor wedges), imsd stores the lines up
// to the cap and one marker counting the rest, and the job still ends
// with its result.
func TestLogFloodPastTheCapIsCutAndTheJobFinishes(t *testing.T) {
	e := newStreamEnv(t)
	e.st.SetLogLimits(store.LogLimits{Lines: 100, Bytes: 1 << 20})
	ctx := context.Background()
	if err := e.st.EnqueueJob(ctx, store.Job{ID: "job_1", InstallID: "ins_1", ComponentType: "action", Operation: "apply",
		Config: []byte(`{}`), MaxAttempts: 3, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.open(t, "inst-a")
	cs.next(t) // welcome
	as := cs.next(t).GetAssignment()
	if as == nil {
		t.Fatal("want job_1 assigned")
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: 1, JobId: "job_1", FencingToken: as.FencingToken}}}
	if acc := cs.next(t).GetAccepted(); acc == nil || acc.WriteId != 1 {
		t.Fatal("want the ack accepted")
	}
	nextMsg := func() *agentv1.ConnectResponse {
		t.Helper()
		for {
			m := cs.next(t)
			if m.GetAudit() == nil { // the agent's copy of the chain
				return m
			}
		}
	}
	const batches, per = 20, 50
	seq := int64(0)
	for b := range batches {
		var ls []*agentv1.LogLine
		for range per {
			seq++
			ls = append(ls, &agentv1.LogLine{Seq: seq, Time: timestamppb.New(e.clk.Now()), Stream: 1, Text: fmt.Sprintf("yes %d", seq)})
		}
		id := uint64(10 + b)
		cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Logs{Logs: &agentv1.JobLogs{WriteId: id, JobId: "job_1", FencingToken: as.FencingToken, Lines: ls}}}
		if acc := nextMsg().GetAccepted(); acc == nil || acc.WriteId != id {
			t.Fatalf("batch %d (lines to %d): want it accepted", b, seq)
		}
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
		WriteId: 99, JobId: "job_1", FencingToken: as.FencingToken, Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED}}}
	if acc := nextMsg().GetAccepted(); acc == nil || acc.WriteId != 99 {
		t.Fatal("want the result accepted")
	}
	if j, _ := e.st.GetJob(ctx, "job_1"); j.State != store.JobSucceeded {
		t.Fatalf("job after its result: %s, want succeeded", j.State)
	}
	lines, err := e.st.ListLogs(ctx, "job_1", 0, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 101 {
		t.Fatalf("%d lines stored, want the 100 of the cap and a marker", len(lines))
	}
	m := lines[100]
	if m.Stream != 3 || m.Seq != 101 || !strings.HasPrefix(m.Text, store.CutMarkerPrefix) || !strings.Contains(m.Text, fmt.Sprintf("%d lines", batches*per-100)) {
		t.Fatalf("last line = %+v, want the marker at 101 counting %d lines", m, batches*per-100)
	}
}
