package operatorapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/auth"
	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/auditchain"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// callLimit is the most one operator call may carry (imsd/server).
const callLimit = 4 << 20

// An agent whose journal outgrew one call still gets its results
// imported: once an earlier results file was imported, the next carries
// only the journal records after the head imsd took, chained to it.
// Before, imsd wanted the whole journal from record 1 every time.
func TestImportResultsJournalAfterHead(t *testing.T) {
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a, b := auth.NewSortableID("bdl_", t0), auth.NewSortableID("bdl_", t0.Add(time.Minute))
	// 80 records of 64 KiB before bundle a's: records 1-82 are a's file's
	// journal; b's records are 83 and 84.
	sh := journalShape{ownOnly: true, pad: map[string]int{a: 80}, padBytes: 64 << 10}
	whole := resultsFilesWith(t, key, ag.ID, agentKey, t0, sh, a, b)
	sh.from = map[string]int64{b: 83}
	files := resultsFilesWith(t, key, ag.ID, agentKey, t0, sh, a, b)
	if len(whole[b]) <= callLimit || len(files[b]) >= callLimit {
		t.Fatalf("the whole journal's file is %d bytes, the one after the head %d: want more, and less, than %d", len(whole[b]), len(files[b]), callLimit)
	}
	if out, err := importResults(s, files[a]); err != nil || out.JournalRecords != 82 {
		t.Fatalf("bundle a's results: %v, %v", out, err)
	}
	out, err := importResults(s, files[b])
	if err != nil || out.AlreadyImported || out.JournalRecords != 84 {
		t.Fatalf("bundle b's results, journal after the head: %v, %v", out, err)
	}
	if _, _, err := st.GetWorkflow(context.Background(), out.WorkflowId); err != nil {
		t.Fatalf("bundle b's workflow: %v", err)
	}
}

// A journal after the head that skips, alters or relinks a record, or
// starts past the head, is refused naming the record; nothing is
// recorded.
func TestImportResultsJournalAfterHeadRefused(t *testing.T) {
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a, b, c := auth.NewSortableID("bdl_", t0), auth.NewSortableID("bdl_", t0.Add(time.Minute)), auth.NewSortableID("bdl_", t0.Add(2*time.Minute))
	ok := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{ownOnly: true}, a, b, c)
	if _, err := importResults(s, ok[a]); err != nil {
		t.Fatal(err)
	}
	// Head: record 2. c's journal from record 3: records 3-6.
	for _, tc := range []struct {
		name, want string
		edit       func(rs []auditchain.Record) []auditchain.Record
	}{
		{"record 3 left out", "the journal starts at record 4, and imsd holds the agent's journal up to record 2 only: records 3 to 3 are missing", func(rs []auditchain.Record) []auditchain.Record { return rs[1:] }},
		{"record 4 left out", "record 4: the chain goes from record 3 to record 5", func(rs []auditchain.Record) []auditchain.Record { return append(rs[:1], rs[2:]...) }},
		{"record 6 altered", "record 6: changed: its content does not match its hash", func(rs []auditchain.Record) []auditchain.Record {
			rs[3].Data = strings.Replace(rs[3].Data, "succeeded", "failed", 1)
			return rs
		}},
		{"record 3 relinked", "record 3: changed: its prev is not the hash", func(rs []auditchain.Record) []auditchain.Record {
			rs[0].Prev = rs[1].Hash
			return rs
		}},
	} {
		sh := journalShape{ownOnly: true, from: map[string]int64{c: 3}, edit: func(id string, rs []auditchain.Record) []auditchain.Record {
			if id == c {
				return tc.edit(rs)
			}
			return rs
		}}
		files := resultsFilesWith(t, key, ag.ID, agentKey, t0, sh, a, b, c)
		_, err := importResults(s, files[c])
		if err == nil || !strings.Contains(err.Error(), "journal.jsonl: "+tc.want) {
			t.Fatalf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if _, _, err := st.GetWorkflow(context.Background(), "wf_"+strings.TrimPrefix(c, "bdl_")); !errs.Is(err, errs.NotFound) {
			t.Fatalf("%s: the refused results left a workflow: %v", tc.name, err)
		}
	}
}

// A journal starting at or before the head imsd holds (an older agent's
// whole journal, or a bundle made before the last import, which named
// an older head) imports if its record at the head has the head's hash.
func TestImportResultsJournalBeforeHead(t *testing.T) {
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a, b, c := auth.NewSortableID("bdl_", t0), auth.NewSortableID("bdl_", t0.Add(time.Minute)), auth.NewSortableID("bdl_", t0.Add(2*time.Minute))
	// b and c were both made after a's results were imported (head 2);
	// b's are imported first (head 4), then c's, from record 3.
	sh := journalShape{ownOnly: true, from: map[string]int64{b: 3, c: 3}}
	files := resultsFilesWith(t, key, ag.ID, agentKey, t0, sh, a, b, c)
	for _, id := range []string{a, b} {
		if _, err := importResults(s, files[id]); err != nil {
			t.Fatalf("bundle %s's results: %v", id, err)
		}
	}
	// Record 4 altered (re-hashed, and the records after relinked): not
	// the head imsd took.
	bad := resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{ownOnly: true, from: sh.from, edit: func(id string, rs []auditchain.Record) []auditchain.Record {
		if id != c {
			return rs
		}
		rs[1].Data = strings.Replace(rs[1].Data, "succeeded", "failed", 1)
		for i := 1; i < len(rs); i++ {
			p := rs[i-1]
			rs[i] = auditchain.Next(&p, rs[i])
		}
		return rs
	}}, a, b, c)
	if _, err := importResults(s, bad[c]); err == nil || !strings.Contains(err.Error(), "does not continue the one imported before (record 4 had hash") {
		t.Fatalf("c's results with record 4 altered: %v", err)
	}
	if out, err := importResults(s, files[c]); err != nil || out.AlreadyImported || out.JournalRecords != 6 {
		t.Fatalf("c's results from record 3: %v, %v", out, err)
	}
}

// A later results file of a bundle whose results were imported, which
// carries a result imsd does not hold (a step the customer's controls
// refused, re-run at a later import of the same bundle), adds it: the
// job's re-run is recorded (attempt 2), the workflow and the install
// end as it leaves them. The same file again changes nothing and says
// so. A later file that contradicts a result imsd holds is refused
// naming the job, and changes nothing. imsd used to answer every later
// file that its results were imported before, and nothing changed.
func TestImportResultsLaterFileOfABundle(t *testing.T) {
	ctx := context.Background()
	s, st, key, t0 := bundleService(t)
	ag, agentKey := resultsAgent(t, s, st, t0)
	a, b := auth.NewSortableID("bdl_", t0), auth.NewSortableID("bdl_", t0.Add(time.Minute))
	jobA, jobB := "job_"+strings.TrimPrefix(a, "bdl_"), "job_"+strings.TrimPrefix(b, "bdl_")
	files := func(outcomes map[string][]string, ids ...string) map[string][]byte {
		return resultsFilesWith(t, key, ag.ID, agentKey, t0, journalShape{ownOnly: true, outcomes: outcomes}, ids...)
	}
	held := func(job string, want store.JobState, attempt int) {
		t.Helper()
		if j, err := st.GetJob(ctx, job); err != nil || j.State != want || j.Attempt != attempt {
			t.Fatalf("job %s: %v attempt %d, %v; want %s attempt %d", job, j.State, j.Attempt, err, want, attempt)
		}
	}
	installState := func(want store.InstallState) {
		t.Helper()
		if in, err := st.GetInstall(ctx, "acme"); err != nil || in.State != want {
			t.Fatalf("install acme: %v, %v; want %s", in.State, err, want)
		}
	}
	first := files(map[string][]string{a: {"refused"}}, a)[a]
	if out, err := importResults(s, first); err != nil || out.WorkflowState != imsv1.WorkflowState_WORKFLOW_STATE_FAILED {
		t.Fatalf("the first file, its step refused: %v, %v", out, err)
	}
	if out, err := importResults(s, first); err != nil || !out.AlreadyImported {
		t.Fatalf("the first file again: %v, %v", out, err)
	}
	held(jobA, store.JobRefused, 1)
	installState(store.InstallFailed)

	rerun := files(map[string][]string{a: {"refused", "succeeded"}}, a)[a]
	out, err := importResults(s, rerun)
	if err != nil || out.AlreadyImported || out.AddedJobs != 1 || out.WorkflowState != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED || out.JournalRecords != 4 {
		t.Fatalf("a later file with the refused step re-run: %v, %v", out, err)
	}
	held(jobA, store.JobSucceeded, 2)
	installState(store.InstallActive)
	if wf, steps, err := st.GetWorkflow(ctx, out.WorkflowId); err != nil || wf.State != store.WorkflowSucceeded || len(steps) != 1 || steps[0].State != store.StepSucceeded {
		t.Fatalf("the workflow after the re-run: %v, %v, %v", wf.State, steps, err)
	}
	if out, err := importResults(s, rerun); err != nil || !out.AlreadyImported || out.AddedJobs != 0 {
		t.Fatalf("the later file again: %v, %v", out, err)
	}

	later := files(map[string][]string{a: {"refused", "succeeded"}, b: {"succeeded"}}, a, b)[b]
	if out, err := importResults(s, later); err != nil || out.WorkflowState != imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED {
		t.Fatalf("bundle b's results: %v, %v", out, err)
	}
	contra := files(map[string][]string{a: {"refused", "succeeded"}, b: {"succeeded", "failed"}}, a, b)[b]
	_, err = importResults(s, contra)
	if err == nil || !strings.Contains(err.Error(), "job "+jobB+" (step hello) failed in this file, and imsd holds it succeeded") ||
		!strings.Contains(err.Error(), "nothing was recorded") {
		t.Fatalf("a later file contradicting a result held: %v", err)
	}
	held(jobB, store.JobSucceeded, 1)
	// a's later file again, after b's results: refused (it would set
	// the install back), nothing changed.
	if _, err = importResults(s, rerun); err == nil || !strings.Contains(err.Error(), "nothing was recorded") {
		t.Fatalf("a's later file after b's results: %v", err)
	}
	held(jobA, store.JobSucceeded, 2)
}
