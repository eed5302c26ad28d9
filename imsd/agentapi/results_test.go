package agentapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// deepValue is a planned change's value: a chain of levels objects.
func deepValue(t *testing.T, levels int) *structpb.Value {
	t.Helper()
	top := map[string]any{}
	cur := top
	for range levels {
		next := map[string]any{}
		cur["a"] = next
		cur = next
	}
	v, err := structpb.NewValue(top)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A planned change's value nested past the plan digest's depth limit is
// not stored: the change is, with the value left out and its summary
// saying which value, where and which limit. One at the limit is stored.
func TestPlannedChangesBoundTheDepth(t *testing.T) {
	in := []*agentv1.PlannedChange{
		{Address: "deep", Action: "update", Summary: "changes x", Before: deepValue(t, 2), After: deepValue(t, agentproto.MaxConfigDepth+1)},
		{Address: "edge", Action: "create", After: deepValue(t, agentproto.MaxConfigDepth)},
	}
	out, err := plannedChanges(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("got %d changes, want 2", len(out))
	}
	deep := out[0]
	if deep.After != nil || string(deep.Before) != `{"a":{"a":{}}}` {
		t.Errorf("deep change: before %s, after %d bytes; want before stored, after left out", deep.Before, len(deep.After))
	}
	if want := "changes x; imsd did not store the after value of this change: after.a.a"; !strings.HasPrefix(deep.Summary, want) ||
		!strings.HasSuffix(deep.Summary, ": nested deeper than 100 levels (the limit is 100)") {
		t.Errorf("deep change summary %q, want it to start %q and name the limit", deep.Summary, want)
	}
	if out[1].After == nil || out[1].Summary != "" {
		t.Errorf("a value at the limit: after %d bytes, summary %q; want it stored as is", len(out[1].After), out[1].Summary)
	}
}

// Through the stream: a result without a plan digest whose planned change
// is nested past the limit is accepted and stored with the note in place
// of the value; the stored job reads back.
func TestResultWithoutDigestStoresNoDeepPlannedValue(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	if err := e.st.EnqueueJob(ctx, store.Job{ID: "job_1", InstallID: "ins_1", ComponentType: "action", Operation: "plan",
		Config: []byte(`{}`), MaxAttempts: 1, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.open(t, "inst-a")
	cs.next(t) // welcome
	as := cs.next(t).GetAssignment()
	if as == nil {
		t.Fatal("want job_1 assigned")
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: 1, JobId: "job_1", FencingToken: as.FencingToken}}}
	if acc := cs.next(t).GetAccepted(); acc == nil {
		t.Fatal("want the ack accepted")
	}
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
		WriteId: 2, JobId: "job_1", FencingToken: as.FencingToken, Outcome: agentv1.Outcome_OUTCOME_SUCCEEDED,
		PlannedChanges: []*agentv1.PlannedChange{{Address: "r", Action: "update", Before: deepValue(t, 1000)}}}}}
	if acc := cs.next(t).GetAccepted(); acc == nil || acc.WriteId != 2 {
		t.Fatal("want the result accepted")
	}
	j, err := e.st.GetJob(ctx, "job_1")
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobSucceeded || len(j.PlannedChanges) != 1 || j.PlannedChanges[0].Before != nil ||
		!strings.Contains(j.PlannedChanges[0].Summary, "imsd did not store the before value of this change: before.a.a") {
		var got []string
		for _, c := range j.PlannedChanges {
			got = append(got, fmt.Sprintf("%s: before %d bytes, summary %q", c.Address, len(c.Before), c.Summary))
		}
		t.Fatalf("stored job %s with changes %q, want succeeded with the deep value left out and said so", j.State, got)
	}
}

// A result's error over MaxLogLineBytes is cut without splitting a
// character: a string cut mid-character is not UTF-8, which PostgreSQL
// refuses to store and protobuf refuses to send (byoc job get would fail
// on the job for good).
func TestLongErrorCutOnACharacter(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	if err := e.st.EnqueueJob(ctx, store.Job{ID: "job_1", InstallID: "ins_1", ComponentType: "action", Operation: "apply",
		Config: []byte(`{}`), MaxAttempts: 1, Timeout: time.Minute, CreatedAt: e.clk.Now(), CreatedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.open(t, "inst-a")
	cs.next(t) // welcome
	as := cs.next(t).GetAssignment()
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Ack{Ack: &agentv1.JobAck{WriteId: 1, JobId: "job_1", FencingToken: as.FencingToken}}}
	if acc := cs.next(t).GetAccepted(); acc == nil {
		t.Fatal("want the ack accepted")
	}
	long := "x" + strings.Repeat("é", MaxLogLineBytes) // "é" is two bytes: the cut falls inside one
	cs.in <- &agentv1.ConnectRequest{Msg: &agentv1.ConnectRequest_Result{Result: &agentv1.JobResult{
		WriteId: 2, JobId: "job_1", FencingToken: as.FencingToken, Outcome: agentv1.Outcome_OUTCOME_FAILED, Error: long,
		PolicyFindings: []*agentv1.PolicyFinding{{Policy: strings.Repeat("é", 600) + "x", Source: "customer", Level: "warn", Message: long}}}}}
	if acc := cs.next(t).GetAccepted(); acc == nil || acc.WriteId != 2 {
		t.Fatal("want the result accepted")
	}
	j, err := e.st.GetJob(ctx, "job_1")
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(j.Error) || len(j.Error) > MaxLogLineBytes || len(j.Error) < MaxLogLineBytes-1 || strings.ContainsRune(j.Error, utf8.RuneError) {
		t.Fatalf("stored error: %d bytes, valid UTF-8 %v", len(j.Error), utf8.ValidString(j.Error))
	}
	if f := j.PolicyFindings; len(f) != 1 || !utf8.ValidString(f[0].Message) || !utf8.ValidString(f[0].Policy) || strings.ContainsRune(f[0].Policy, utf8.RuneError) {
		t.Fatalf("stored findings: %+v", f)
	}
}
