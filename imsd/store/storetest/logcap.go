// Conformance, bounded logs: the per-job log cap (its marker line, resent
// batches, later attempts, two replicas appending at once) and the log
// retention (PruneLogs: batches, what it leaves, replicas pruning at once).

package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
)

// stored splits a job's lines into the agent's and the markers (stream 3).
func (e *env) stored(jobID string) (lines, markers []store.LogLine) {
	e.t.Helper()
	all, err := e.s.ListLogs(e.ctx(), jobID, 0, 0, 10000)
	ok(e.t, err)
	for _, l := range all {
		if l.Stream == 3 {
			markers = append(markers, l)
		} else {
			lines = append(lines, l)
		}
	}
	return lines, markers
}

func testLogCap(t *testing.T, e *env) {
	ctx := e.ctx()
	e.s.SetLogLimits(store.LogLimits{Lines: 10, Bytes: 1 << 20})
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	c := e.claimOne(inst, "ag-1", T0)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 1, 6)))
	// 4-6 were stored: the cap counts 7-10 in, and drops 11 and 12.
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 4, 12)))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 4, 12))) // resent: nothing counted twice
	kept, markers := e.stored("job-1")
	equal(t, "lines kept", len(kept), 10)
	equal(t, "last kept", kept[9].Seq, int64(10))
	if len(markers) != 1 || markers[0].Seq != 11 || markers[0].Attempt != 1 {
		t.Fatalf("markers = %+v, want one at (1, 11)", markers)
	}
	want := store.CutMarker(store.LogLimits{Lines: 10, Bytes: 1 << 20}, 2, int64(len("line 11")+len("line 12")))
	equal(t, "marker", markers[0].Text, want)
	if !strings.Contains(want, "--job-log-max-lines") || !strings.Contains(want, "2 lines (14 B) dropped") {
		t.Errorf("marker %q names neither the flag nor the count", want)
	}
	// Later batches are counted on the same marker.
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 13, 15)))
	_, markers = e.stored("job-1")
	if len(markers) != 1 || !strings.Contains(markers[0].Text, "5 lines") {
		t.Fatalf("markers after more = %+v, want one counting 5 lines", markers)
	}
	equal(t, "dropped (metric)", e.s.LogLinesDropped(), int64(5))

	// The attempts share the cap: a retry past it gets a marker of
	// its own, and still finishes with its result.
	_, err := e.s.ExpireLeases(ctx, at(time.Hour))
	ok(t, err)
	c2 := e.claimOne(inst, "ag-1", at(time.Hour))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), lines(2, 1, 3)))
	kept, markers = e.stored("job-1")
	equal(t, "lines kept after attempt 2", len(kept), 10)
	if len(markers) != 2 || markers[1].Attempt != 2 || markers[1].Seq != 1 || !strings.Contains(markers[1].Text, "3 lines") {
		t.Fatalf("markers = %+v, want attempt 2's at seq 1 counting 3 lines", markers)
	}
	ok(t, e.s.AckJob(ctx, "job-1", writer(c2), at(time.Hour+time.Minute), at(time.Hour)))
	changed, err := e.s.FinishJob(ctx, "job-1", writer(c2), store.Result{State: store.JobSucceeded}, at(time.Hour))
	ok(t, err)
	equal(t, "finished", changed, true)
	equal(t, "state", e.job("job-1").State, store.JobSucceeded)

	// Bytes: "line 1".."line 3" (18 bytes) fit in 20, "line 4" does not.
	e.s.SetLogLimits(store.LogLimits{Lines: 1000, Bytes: 20})
	e.enqueue("job-2", inst, at(2*time.Hour))
	c3 := e.claimOne(inst, "ag-1", at(2*time.Hour))
	ok(t, e.s.AppendLogs(ctx, "job-2", writer(c3), lines(1, 1, 5)))
	kept, markers = e.stored("job-2")
	equal(t, "lines within the bytes", len(kept), 3)
	if len(markers) != 1 || markers[0].Seq != 4 || !strings.Contains(markers[0].Text, "2 lines (12 B)") || !strings.Contains(markers[0].Text, "20 B") {
		t.Fatalf("markers = %+v, want one at 4 counting 2 lines of 12 B under 20 B", markers)
	}
}

// testLogCapReplicas: two stores on one database (two imsd replicas)
// appending to one job at once keep it within the cap, exactly: the count
// is the job row's, not a replica's.
func testLogCapReplicas(t *testing.T, e *env) {
	ctx := e.ctx()
	lim := store.LogLimits{Lines: 50, Bytes: 1 << 20}
	e.s.SetLogLimits(lim)
	other := e.second()
	other.SetLogLimits(lim)
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	c := e.claimOne(inst, "ag-1", T0)
	var wg sync.WaitGroup
	errc := make(chan error, 40)
	for i := range 40 {
		s := e.s
		if i%2 == 1 {
			s = other
		}
		wg.Go(func() {
			from := int64(i*5 + 1)
			errc <- s.AppendLogs(ctx, "job-1", writer(c), lines(1, from, from+4))
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		ok(t, err)
	}
	kept, markers := e.stored("job-1")
	equal(t, "lines kept", len(kept), 50)
	if len(markers) != 1 {
		t.Fatalf("markers = %+v, want one", markers)
	}
	// The count on the marker is exact for batches in order, as one
	// agent sends them; batches racing here arrive in any order, and a
	// line below the highest seq seen counts as sent before.
	if n := e.s.LogLinesDropped() + other.LogLinesDropped(); n < 1 || n > 150 {
		t.Errorf("dropped %d lines, want 1 to 150", n)
	}
}

func testLogPrune(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	finish := func(id string, n int64, ended time.Time) {
		t.Helper()
		e.enqueue(id, inst, ended.Add(-time.Minute))
		c := e.claimOne(inst, "ag-1", ended.Add(-time.Minute))
		ok(t, e.s.AppendLogs(ctx, id, writer(c), lines(1, 1, n)))
		_, err := e.s.FinishJob(ctx, id, writer(c), store.Result{State: store.JobFailed, ExitCode: 3, Error: "boom"}, ended)
		ok(t, err)
	}
	finish("job-old", 25, at(time.Minute))
	finish("job-new", 5, at(2*time.Hour))
	e.enqueue("job-running", inst, at(time.Minute))
	c := e.claimOne(inst, "ag-1", at(time.Minute))
	ok(t, e.s.AppendLogs(ctx, "job-running", writer(c), lines(1, 1, 3)))
	kindsBefore := e.kinds(inst)

	now := at(90 * time.Minute)
	var got []string
	for range 10 {
		r, err := e.s.PruneLogs(ctx, time.Hour, now, 10)
		ok(t, err)
		if r.JobID == "" {
			break
		}
		got = append(got, fmt.Sprintf("%s %d %v", r.JobID, r.Lines, r.Done))
	}
	equal(t, "prune rounds", strings.Join(got, ", "), "job-old 10 false, job-old 10 false, job-old 5 true")

	kept, markers := e.stored("job-old")
	equal(t, "lines left", len(kept), 0)
	if len(markers) != 1 || !strings.HasPrefix(markers[0].Text, store.PrunedMarkerPrefix) || !strings.Contains(markers[0].Text, "--job-log-retention") ||
		!strings.Contains(markers[0].Text, "1h0m0s") || markers[0].Attempt != 1 || markers[0].Seq != 0 {
		t.Fatalf("markers = %+v, want one saying the retention removed the log", markers)
	}
	tail, err := e.s.ListLogsBefore(ctx, "job-old", 0, 0, 10)
	ok(t, err)
	if len(tail) != 1 || tail[0].Text != markers[0].Text {
		t.Errorf("tail of a pruned log = %+v, want its marker", tail)
	}
	j := e.job("job-old")
	if j.State != store.JobFailed || j.ExitCode != 3 || j.Error != "boom" {
		t.Errorf("pruned job = %+v, want its result kept", j)
	}
	equal(t, "audit events", strings.Join(e.kinds(inst), " "), strings.Join(kindsBefore, " "))
	if p := e.verify(inst); p != nil {
		t.Errorf("audit chain after pruning: %v", p)
	}
	kept, _ = e.stored("job-new")
	equal(t, "lines of a job within the retention", len(kept), 5)
	kept, _ = e.stored("job-running")
	equal(t, "lines of a running job", len(kept), 3)

	// Later, the newer job goes too, and once only.
	r, err := e.s.PruneLogs(ctx, time.Hour, at(4*time.Hour), 0)
	ok(t, err)
	equal(t, "second job", fmt.Sprintf("%s %d %v", r.JobID, r.Lines, r.Done), "job-new 5 true")
	r, err = e.s.PruneLogs(ctx, time.Hour, at(5*time.Hour), 0)
	ok(t, err)
	equal(t, "nothing left", r.JobID, "")
	r, err = e.s.PruneLogs(ctx, 0, at(5*time.Hour), 0)
	ok(t, err)
	equal(t, "no retention", r.JobID, "")
}

// testLogPruneReplicas: two stores (two replicas) pruning at once each
// take jobs the other does not hold, and together remove every line once.
func testLogPruneReplicas(t *testing.T, e *env) {
	ctx := e.ctx()
	other := e.second()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	const jobs, each = 12, 30
	for i := range jobs {
		id := fmt.Sprintf("job-%02d", i)
		e.enqueue(id, inst, at(time.Duration(i)*time.Second))
		c := e.claimOne(inst, "ag-1", at(time.Minute))
		ok(t, e.s.AppendLogs(ctx, id, writer(c), lines(1, 1, each)))
		_, err := e.s.FinishJob(ctx, id, writer(c), store.Result{State: store.JobSucceeded}, at(time.Minute))
		ok(t, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
		done  = map[string]int{}
	)
	errc := make(chan error, 2)
	for _, s := range []*store.Store{e.s, other} {
		wg.Go(func() {
			for {
				r, err := s.PruneLogs(ctx, time.Hour, at(3*time.Hour), 7)
				if err != nil || r.JobID == "" {
					errc <- err
					return
				}
				mu.Lock()
				total += r.Lines
				if r.Done {
					done[r.JobID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		ok(t, err)
	}
	equal(t, "lines pruned", total, int64(jobs*each))
	equal(t, "jobs pruned", len(done), jobs)
	for id, n := range done {
		equal(t, "times "+id+" was finished", n, 1)
		kept, markers := e.stored(id)
		if len(kept) != 0 || len(markers) != 1 {
			t.Errorf("%s: %d lines and %d markers left, want only the marker", id, len(kept), len(markers))
		}
	}
}

// testLogPruneRerun: a refused offline step's job whose log was pruned,
// re-run by a later results file (attempt 2), has its new lines pruned
// in their turn.
func testLogPruneRerun(t *testing.T, e *env) {
	ctx := e.ctx()
	ins := e.install("offline-prune")
	e.agent(ins, "ag-op")
	j := newJob("job-op-web", ins, at(time.Minute))
	j.ComponentType, j.Component, j.MaxAttempts = "action", "web", 1
	ok(t, e.s.RecordOfflineWorkflow(ctx, store.OfflineWorkflow{
		Workflow: store.Workflow{ID: "wf-op", InstallID: ins, Kind: "provision", AppRevision: 4, Parallelism: 1, CreatedAt: at(time.Minute), CreatedBy: "bundle b"},
		Steps:    planSteps("web"), AgentID: "ag-op",
		Ran: []store.OfflineStep{{Name: "web", Job: j, Result: store.Result{State: store.JobRefused, ExitCode: -1, Error: "refused: maintenance is off"},
			Logs: lines(1, 1, 3), Started: at(2 * time.Minute), Ended: at(3 * time.Minute), StepState: store.StepFailed, Msg: "refused"}},
		State: store.WorkflowFailed, Msg: "steps not succeeded: web", InstallState: store.InstallFailed,
		Audit: store.AuditEvent{Chain: ins, At: at(4 * time.Minute), Kind: "bundle.results_imported", Actor: "imsd", Subject: "bundle:wf-op"},
		Now:   at(4 * time.Minute),
	}))
	r, err := e.s.PruneLogs(ctx, time.Hour, at(2*time.Hour), 0)
	ok(t, err)
	equal(t, "first prune", fmt.Sprintf("%s %d %v", r.JobID, r.Lines, r.Done), "job-op-web 3 true")

	ok(t, e.s.RecordOfflineRerun(ctx, store.OfflineRerun{WorkflowID: "wf-op", AgentID: "ag-op", Rerun: map[string]bool{"web": true},
		Ran: []store.OfflineStep{{Name: "web", Job: j, Result: store.Result{State: store.JobSucceeded}, Logs: lines(2, 1, 2),
			Started: at(3 * time.Hour), Ended: at(3*time.Hour + time.Minute), StepState: store.StepSucceeded}},
		State: store.WorkflowSucceeded, InstallState: store.InstallActive, Revision: 4,
		Audit: store.AuditEvent{Chain: ins, At: at(3*time.Hour + 2*time.Minute), Kind: "bundle.results_imported", Actor: "imsd", Subject: "bundle:wf-op"},
		Now:   at(3*time.Hour + 2*time.Minute)}))
	kept, _ := e.stored("job-op-web")
	equal(t, "lines of the re-run", len(kept), 2)
	r, err = e.s.PruneLogs(ctx, time.Hour, at(5*time.Hour), 0)
	ok(t, err)
	equal(t, "prune after the re-run", fmt.Sprintf("%s %d %v", r.JobID, r.Lines, r.Done), "job-op-web 2 true")
}
