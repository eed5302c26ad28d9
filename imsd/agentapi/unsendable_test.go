package agentapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// deepConfig is a config whose innermost value sits depth levels down.
func deepConfig(depth int) []byte {
	return []byte(`{` + strings.Repeat(`"a":{`, depth-1) + `"a":1` + strings.Repeat(`}`, depth-1) + `}`)
}

// A job whose stored config breaks the job config limits (stored before
// enqueue checked them, or written to the database by hand) fails at once
// with the limit and the value's path as its reason, audited with imsd as
// the actor; nothing of it reaches the agent, and the install's next job
// is assigned as usual.
func TestUnsendableJobFailsAtOnceWithTheLimit(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	// Straight into the store: operatorapi's enqueue would refuse it.
	for i, j := range []store.Job{
		{ID: "job_deep", Config: deepConfig(agentproto.MaxConfigDepth + 50)},
		{ID: "job_good", Config: []byte(`{"steps":[{"run":"x"}]}`)},
	} {
		j.InstallID, j.ComponentType, j.Operation, j.MaxAttempts, j.Timeout = "ins_1", "action", "apply", 3, time.Minute
		j.CreatedAt, j.CreatedBy = e.clk.Now().Add(time.Duration(i)*time.Millisecond), "t"
		if err := e.st.EnqueueJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := e.open(t, "inst-a")
	if w := cs.next(t).GetWelcome(); w == nil {
		t.Fatal("want a welcome")
	}
	if as := cs.next(t).GetAssignment(); as == nil || as.JobId != "job_good" {
		t.Fatalf("want job_good assigned (and nothing of job_deep sent), got %v", as)
	}
	deadline := time.Now().Add(5 * time.Second)
	var j store.Job
	for {
		var err error
		if j, err = e.st.GetJob(ctx, "job_deep"); err != nil {
			t.Fatal(err)
		}
		if j.State.Terminal() || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := "config" + strings.Repeat(".a", 4) // the path starts .a.a.a…
	if j.State != store.JobFailed || !strings.Contains(j.Error, "nested deeper than 100 levels (the limit is 100)") ||
		!strings.Contains(j.Error, want) || strings.Contains(j.Error, "acknowledged") {
		t.Fatalf("job_deep is %s (%q), want failed naming the depth limit and the path", j.State, j.Error)
	}
	recs, err := e.st.AuditRecordsAfter(ctx, "ins_1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range recs {
		if r.Subject == "job:job_deep" && r.Kind == "job.finished" {
			found = true
			if r.Actor != "imsd" || !strings.Contains(r.Data, "nested deeper") || !strings.Contains(r.Data, e.agent) {
				t.Errorf("audit record %+v: want actor imsd, the error and the agent", r)
			}
		}
	}
	if !found {
		t.Fatalf("no job.finished audit record for job_deep in %+v", recs)
	}
	// Nothing more was sent: no assignment of job_deep, no cancel.
	select {
	case m := <-cs.out:
		t.Fatalf("imsd sent more: %v", m)
	case <-time.After(100 * time.Millisecond):
	}
}
