// Conformance, logs: appending and reading job logs, and the lines of
// earlier attempts (ListLogsBefore).

package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

func testLogs(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	c := e.claimOne(inst, "ag-1", T0)
	w := writer(c)

	batch := lines(1, 1, 5)
	ok(t, e.s.AppendLogs(ctx, "job-1", w, batch))
	ok(t, e.s.AppendLogs(ctx, "job-1", w, batch)) // resent after a reconnect
	ok(t, e.s.AppendLogs(ctx, "job-1", w, lines(1, 4, 7)))
	got := e.logs("job-1")
	equal(t, "lines", len(got), 7)
	for i, l := range got {
		equal(t, "seq", l.Seq, int64(i+1))
		equal(t, "attempt", l.Attempt, 1)
		equal(t, "text", l.Text, fmt.Sprintf("line %d", i+1))
		equal(t, "time", l.Time, at(time.Duration(i+1)*time.Millisecond))
	}

	// Attempt 2 follows attempt 1 whatever the seqs.
	_, err := e.s.ExpireLeases(ctx, at(time.Hour))
	ok(t, err)
	c2 := e.claimOne(inst, "ag-1", at(time.Hour))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), []store.LogLine{
		{Seq: 1, Time: at(time.Hour), Stream: 3, Text: "retrying"},
		{Seq: 2, Time: at(time.Hour), Stream: 2, Text: "bad \xff byte and a \x00 NUL"},
	}))
	page, err := e.s.ListLogs(ctx, "job-1", 1, 6, 2)
	ok(t, err)
	if len(page) != 2 || page[0].Attempt != 1 || page[0].Seq != 7 || page[1].Attempt != 2 || page[1].Seq != 1 {
		t.Fatalf("ListLogs after (1, 6) = %+v, want (1,7), (2,1)", page)
	}
	equal(t, "stream", page[1].Stream, 3)
	page, err = e.s.ListLogs(ctx, "job-1", 2, 1, 10)
	ok(t, err)
	if len(page) != 1 || page[0].Text != "bad \uFFFD byte and a \uFFFD NUL" {
		t.Fatalf("ListLogs after (2, 1) = %+v", page)
	}
	page, err = e.s.ListLogs(ctx, "job-1", 2, 2, 10)
	ok(t, err)
	equal(t, "lines after the end", len(page), 0)

	// Large batches are chunked and still stored once.
	big := lines(2, 10, 1400)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), big))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), big))
	all, err := e.s.ListLogs(ctx, "job-1", 0, 0, 5000)
	ok(t, err)
	equal(t, "all lines", len(all), 7+2+1391)

	wantErr(t, e.s.AppendLogs(ctx, "job-1", writer(c2), []store.LogLine{{Seq: 9, Stream: 7}}), errs.Invalid, "stream")
	_, err = e.s.ListLogs(ctx, "nope", 0, 0, 10)
	wantErr(t, err, errs.NotFound)
	e.enqueue("job-2", inst, T0)
	none, err := e.s.ListLogs(ctx, "job-2", 0, 0, 10)
	ok(t, err)
	equal(t, "lines of a fresh job", len(none), 0)
}

func testLogsBefore(t *testing.T, e *env) {
	ctx := e.ctx()
	inst := e.install("acme")
	e.agent(inst, "ag-1")
	e.enqueue("job-1", inst, T0)
	c := e.claimOne(inst, "ag-1", T0)
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c), lines(1, 1, 10)))
	_, err := e.s.ExpireLeases(ctx, at(time.Hour))
	ok(t, err)
	c2 := e.claimOne(inst, "ag-1", at(time.Hour))
	ok(t, e.s.AppendLogs(ctx, "job-1", writer(c2), lines(2, 1, 3)))

	seqs := func(ls []store.LogLine) string {
		var out []string
		for _, l := range ls {
			out = append(out, fmt.Sprintf("%d.%d", l.Attempt, l.Seq))
		}
		return strings.Join(out, " ")
	}
	tail, err := e.s.ListLogsBefore(ctx, "job-1", 0, 0, 4)
	ok(t, err)
	equal(t, "last 4 lines, oldest first", seqs(tail), "1.10 2.1 2.2 2.3")
	page, err := e.s.ListLogsBefore(ctx, "job-1", 2, 1, 3)
	ok(t, err)
	equal(t, "3 before 2.1 (across attempts)", seqs(page), "1.8 1.9 1.10")
	page, err = e.s.ListLogsBefore(ctx, "job-1", 1, 3, 10)
	ok(t, err)
	equal(t, "before 1.3", seqs(page), "1.1 1.2")
	page, err = e.s.ListLogsBefore(ctx, "job-1", 1, 1, 10)
	ok(t, err)
	equal(t, "before the first line", len(page), 0)
}
