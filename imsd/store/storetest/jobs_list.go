// Conformance, jobs reads: ListJobs filters and pages (the store's
// jobs_list.go).

package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testListJobs(t *testing.T, e *env) {
	ctx := e.ctx()
	a := e.install("acme")
	b := e.install("globex")
	e.agent(a, "ag-1")
	var want []string // newest first
	for i := range 25 {
		id := fmt.Sprintf("job-%02d", i)
		inst := a
		if i%3 == 0 {
			inst = b
		}
		// Pairs share a creation time, so the ID breaks ties.
		e.enqueue(id, inst, at(time.Duration(i/2)*time.Second))
		want = append([]string{id}, want...)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
		page, next, err := e.s.ListJobs(ctx, store.JobFilter{Limit: 10, Cursor: cursor})
		ok(t, err)
		got = append(got, ids(page)...)
		if next == "" {
			break
		}
		cursor = next
	}
	equal(t, "all jobs", strings.Join(got, ","), strings.Join(want, ","))

	page, next, err := e.s.ListJobs(ctx, store.JobFilter{InstallID: b})
	ok(t, err)
	equal(t, "next", next, "")
	equal(t, "jobs of b", strings.Join(ids(page), ","), "job-24,job-21,job-18,job-15,job-12,job-09,job-06,job-03,job-00")

	e.claimOne(a, "ag-1", at(time.Hour)) // job-01
	page, _, err = e.s.ListJobs(ctx, store.JobFilter{States: []store.JobState{store.JobAssigned, store.JobRunning}})
	ok(t, err)
	equal(t, "assigned jobs", strings.Join(ids(page), ","), "job-01")

	_, _, err = e.s.ListJobs(ctx, store.JobFilter{Cursor: "garbage!"})
	wantErr(t, err, errs.Invalid, "cursor")
	_, _, err = e.s.ListJobs(ctx, store.JobFilter{Limit: 1001})
	wantErr(t, err, errs.Invalid, "limit")
	_, _, err = e.s.ListJobs(ctx, store.JobFilter{States: []store.JobState{"lost"}})
	wantErr(t, err, errs.Invalid, "states[0]")
}
