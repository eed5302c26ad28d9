package console

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"connectrpc.com/connect"
	"github.com/charmbracelet/x/ansi"
	"google.golang.org/protobuf/types/known/timestamppb"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1/imsv1connect"
)

// updating reports whether -update was given. The flag itself is defined
// by charmbracelet/x/exp/golden, which teatest brings into this test binary.
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func stripANSI(s string) string { return ansi.Strip(s) }

func TestFleetShowsEveryInstallAndUnknownFieldsAsDash(t *testing.T) {
	m := newTestModel(t, Options{})
	mustContain(t, screen(m), "loading installs")
	feed(m, snapshot())
	s := screen(m)
	mustContain(t, s, "4 installs", "acme", "globex", "initech", "online", "offline", "degraded", "none", "now", "5m ago", "1 run 2 queued")
	// initech has never been provisioned: no revision, health, agent or
	// modes, each a dash.
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "initech") && (!strings.Contains(l, "new") || strings.Count(l, dash) < 3) {
			t.Fatalf("row without its state and dashes for HEALTH/HEARTBEAT/MODES: %q", l)
		}
	}
}

func TestStaleFleetResultsAreDropped(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	old := m.fleetGen
	m.startWatch() // as after :ctx: a new generation
	m.Update(fleetMsg{gen: old, events: []fleetEvent{{resp: &imsv1.WatchInstallsResponse{
		Installs: []*imsv1.InstallStatus{status("stale-row", "shop", "online", 0, 0, 0, nil)}}}}})
	mustNotContain(t, screen(m), "stale-row")
	feed(m, &imsv1.WatchInstallsResponse{Installs: []*imsv1.InstallStatus{status("fresh-row", "shop", "online", 0, 0, 0, nil)}})
	mustContain(t, screen(m), "fresh-row")
}

func TestUpdatesMergeAndRemove(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	changed := status("globex", "shop", "online", time.Second, 3, 0, nil)
	feed(m, &imsv1.WatchInstallsResponse{Installs: []*imsv1.InstallStatus{changed}, RemovedInstallIds: []string{"ins_initech"}})
	s := screen(m)
	mustContain(t, s, "3 run 0 queued", "3 installs")
	mustNotContain(t, s, "initech")
}

func TestFilterSubstringAndKeyValue(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "/", "glob")
	s := screen(m)
	mustContain(t, s, "globex", "1 of 4")
	mustNotContain(t, s, "acme")

	press(m, "esc") // leaves the filter input and clears it
	mustContain(t, screen(m), "acme", "globex")

	press(m, "/", "tier=gold", "enter")
	s = screen(m)
	mustContain(t, s, "acme")
	mustNotContain(t, s, "globex", "initech")

	// A masked (sensitive) input never matches, so a filter cannot probe it.
	press(m, "esc", "/", "db_password=hunter2", "enter")
	mustContain(t, screen(m), "no install matches")

	press(m, "esc", "/", "agent=offline", "enter")
	s = screen(m)
	mustContain(t, s, "globex")
	mustNotContain(t, s, "acme")
}

// A filter that is a label selector matches labels, and fields or inputs
// where no label has the key; one that does not parse is words.
func TestFilterLabelSelector(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	for _, tc := range []struct {
		filter    string
		want, not []string
	}{
		{"ring=canary", []string{"acme", "1 of 4"}, []string{"globex", "umbrella"}},
		{"ring!=canary", []string{"globex", "initech", "umbrella", "3 of 4"}, []string{"acme"}},
		{"ring in (canary,prod),!legacy", []string{"acme", "globex", "2 of 4"}, []string{"umbrella", "initech"}},
		{"ring,state=failed", []string{"globex", "1 of 4"}, []string{"acme"}},
		{"example.com/team=a", []string{"acme", "1 of 4"}, []string{"globex"}},
		{"example.com/team", []string{"no install matches"}, nil}, // no operator: a word
		{"legacy", []string{"no install matches"}, nil},           // a word, not a selector: no name holds it
		{"ring=prod umbrella", []string{"umbrella", "1 of 4"}, []string{"globex"}},
	} {
		press(m, "esc", "/", tc.filter, "enter")
		s := screen(m)
		mustContain(t, s, tc.want...)
		mustNotContain(t, s, tc.not...)
	}
}

func TestSortCyclesColumnsAndKeepsSelection(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "j") // globex
	press(m, "s") // by app: billing first
	s := screen(m)
	mustContain(t, s, "sorted by app", "APP↑")
	if strings.Index(s, "initech") > strings.Index(s, "acme") {
		t.Fatalf("billing installs should come first when sorted by app:\n%s", s)
	}
	if v := m.top().(*fleetView); m.fleet.visible[v.pos].Install.Name != "globex" {
		t.Fatalf("the cursor left globex after sorting: on %s", m.fleet.visible[v.pos].Install.Name)
	}
	press(m, "S")
	mustContain(t, screen(m), "APP↓")
}

func TestDrillDownToLogsAndBack(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	if cmd := press(m, "enter"); cmd == nil {
		t.Fatal("opening an install asks for its jobs")
	}
	iv := m.top().(*installView)
	mustContain(t, screen(m), "installs › acme", "loading jobs", "db_password = •••••• (sensitive)", "region = eu-west-1")
	mustNotContain(t, screen(m), "hunter2")

	// A listing for an older generation is dropped.
	m.Update(jobsMsg{gen: iv.gen - 1, jobs: []*imsv1.Job{job("job_stale", "acme", imsv1.JobState_JOB_STATE_QUEUED, 0)}})
	mustNotContain(t, screen(m), "job_stale")
	m.Update(jobsMsg{gen: iv.gen, jobs: jobs()})
	mustContain(t, screen(m), "JOBS (3)", "job_run", "running", "job_bad", "failed")

	press(m, "enter")
	lv, ok := m.top().(*logView)
	if !ok {
		t.Fatalf("enter on a job opens its log, top is %T", m.top())
	}
	mustContain(t, screen(m), "installs › acme › job_run › logs", "no log lines yet")
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 3, func(i int) string { return fmt.Sprintf("hello %d", i) })}}})
	mustContain(t, screen(m), "hello 1", "hello 3", "3 lines", "following")

	press(m, "esc")
	if _, ok := m.top().(*installView); !ok {
		t.Fatalf("esc goes back to the install, top is %T", m.top())
	}
	// The log stream of the closed view is cancelled and its results stale.
	if lv.ctx.Err() == nil {
		t.Fatal("leaving the log view must cancel its stream")
	}
	press(m, "esc")
	mustContain(t, screen(m), "NAME")
}

func TestLogViewKeys(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	lv := newLogView(m.env, jobs()[0])
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 100, func(i int) string { return fmt.Sprintf("line %03d", i) })}}})
	mustContain(t, screen(m), "line 100", "following")
	mustNotContain(t, screen(m), "line 050")

	press(m, "f") // pause
	mustContain(t, screen(m), "paused")
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(101, 101, func(int) string { return "newest" })}}})
	mustNotContain(t, screen(m), "newest") // paused: the view stays put

	press(m, "g")
	mustContain(t, screen(m), "line 001")
	press(m, "G")
	mustContain(t, screen(m), "newest", "following")

	press(m, "/", "line 05", "enter")
	s := screen(m)
	mustContain(t, s, "match 1 of 10", "line 050")
	press(m, "n")
	mustContain(t, screen(m), "match 2 of 10", "line 051")
	press(m, "N", "N")
	mustContain(t, screen(m), "match 10 of 10", "line 059")

	press(m, "t")
	mustContain(t, screen(m), "12:00:02.183 line 059")
	press(m, "t")
	mustNotContain(t, screen(m), "12:00:02.183")
}

// L filters the log by level: a plugin's leveled lines (sdk.NewLogger)
// at the level or above, a line without one counting as info (issue 29).
func TestLogViewLevelFilter(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	lv := newLogView(m.env, jobs()[0])
	m.push(lv)
	texts := []string{"[DEBUG] kv: starting: step=1", "plain line", "[WARN]  kv: disk low: free=3", "[ERROR] kv: failed"}
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 4, func(i int) string { return texts[i-1] })}}})
	mustContain(t, screen(m), "kv: starting", "plain line", "disk low")
	press(m, "L") // debug: all of them
	mustContain(t, screen(m), "level ≥ debug", "kv: starting")
	press(m, "L") // info
	s := screen(m)
	mustContain(t, s, "level ≥ info", "plain line", "disk low")
	mustNotContain(t, s, "kv: starting")
	press(m, "L") // warn
	s = screen(m)
	mustContain(t, s, "level ≥ warn", "disk low", "kv: failed")
	mustNotContain(t, s, "plain line")
	press(m, "L", "L") // error, then all again
	mustContain(t, screen(m), "kv: starting", "plain line")
}

// Texts that stay true once a job has ended (issue 33, item 16): a failed
// job's try is only its number (it is not retried), "1 line" is singular,
// and the status after a cancel names no state that goes stale.
func TestJobTextsStayTrue(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	m.Update(teaSize(120, 30))
	lv := newLogView(m.env, jobs()[2])
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 1, func(int) string { return "boom" })}}})
	mustContain(t, screen(m), "· try 1 · 1 line ·")
	press(m, "/", "nothing", "enter")
	mustContain(t, screen(m), "/nothing: no match in the 1 line held")

	m.cancelGen = 7
	m.Update(cancelledMsg{gen: 7, job: jobs()[0]})
	s := screen(m)
	mustContain(t, s, "asked the agent to stop job job_run")
	mustNotContain(t, s, "now running")
	cancelled := job("job_run", "acme", imsv1.JobState_JOB_STATE_CANCELLED, 0)
	m.Update(cancelledMsg{gen: 7, job: cancelled})
	mustContain(t, screen(m), "job job_run cancelled")
}

func TestLogRingBufferDropsOldestAndMarksIt(t *testing.T) {
	m := newTestModel(t, Options{LogLines: 50}) // pages of 25 lines
	feed(m, snapshot())
	lv := newLogView(m.env, jobs()[0])
	m.push(lv)
	text := func(i int) string { return fmt.Sprintf("line %03d", i) }
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 120, text)}}})
	if lv.r.Len() != 50 || lv.dropped != 70 {
		t.Fatalf("ring holds %d lines, dropped %d; want 50 and 70", lv.r.Len(), lv.dropped)
	}
	// Scrolling back to the first line held asks imsd for the page before it.
	var cmd tea.Cmd
	for i := 0; i < 5 && !lv.fetching; i++ {
		cmd = press(m, "pgup")
	}
	if cmd == nil || !lv.fetching {
		t.Fatal("scrolling back to the first line held asks imsd for the lines before it")
	}
	press(m, "pgup", "pgup")
	mustContain(t, screen(m), "line 071", "fetching older lines from imsd")
	// The page arrives: prepended, and the newest lines dropped to stay
	// within the bound, which stops following.
	m.Update(olderLogsMsg{gen: lv.olderGen, lines: logLines(46, 70, text)})
	if lv.r.Len() != 50 || !lv.tailGap || lv.follow || lv.streamOn {
		t.Fatalf("after a page back: %d lines, tailGap %v, follow %v, stream %v", lv.r.Len(), lv.tailGap, lv.follow, lv.streamOn)
	}
	mustContain(t, screen(m), "line 071") // the view stays on what it showed
	// A stale page (an older request) is dropped.
	m.Update(olderLogsMsg{gen: lv.olderGen - 100, lines: logLines(1, 1, func(int) string { return "stale page" })})
	mustNotContain(t, screen(m), "stale page")

	// g jumps to the log's real start: the first page from imsd.
	if cmd := press(m, "g"); cmd == nil || !lv.forward || lv.r.Len() != 0 {
		t.Fatalf("g with older lines on imsd should read the first page: forward %v, %d lines held", lv.forward, lv.r.Len())
	}
	mustContain(t, screen(m), "reading the log's first lines from imsd")
	m.Update(newerLogsMsg{gen: lv.newerGen, lines: logLines(1, 25, text)})
	mustContain(t, screen(m), "line 001")
	if !lv.tailGap {
		t.Fatal("after reading the first page, the end is not in memory")
	}
	// Scrolling down near the last line held reads on.
	for i := 0; i < 5 && !lv.forward; i++ {
		press(m, "pgdown")
	}
	if !lv.forward {
		t.Fatal("scrolling down to the last line held reads the next page")
	}
	m.Update(newerLogsMsg{gen: lv.newerGen, lines: logLines(26, 50, text)})
	if !lv.tailGap || lv.streamOn {
		t.Fatal("a full page forward is not the end yet")
	}
	for i := 0; i < 5 && !lv.forward; i++ {
		press(m, "pgdown")
	}
	old := lv.gen
	m.Update(newerLogsMsg{gen: lv.newerGen, lines: logLines(51, 60, text)})
	if lv.tailGap || !lv.streamOn || lv.gen == old {
		t.Fatalf("a short page is the end: tailGap %v, stream %v", lv.tailGap, lv.streamOn)
	}
	if f := lv.r.At(0); f.seq != 11 || lv.r.Len() != 50 {
		t.Fatalf("reading forward drops the oldest: first held %d, %d held", f.seq, lv.r.Len())
	}
	// G reloads the end with a new stream generation; the old one is stale.
	old = lv.gen
	m.Update(olderLogsMsg{gen: lv.olderGen, lines: nil})
	press(m, "pgup", "pgup", "pgup")
	if lv.tailGap {
		press(m, "G")
		if lv.gen == old {
			t.Fatal("G after a page back should restart the stream")
		}
	}
	m.Update(logMsg{gen: old - 1, chunks: []logChunk{{lines: logLines(200, 200, func(int) string { return "from an old stream" })}}})
	mustNotContain(t, screen(m), "from an old stream")
}

func TestHugeLineDoesNotStall(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	lv := newLogView(m.env, jobs()[0])
	m.push(lv)
	huge := strings.Repeat("0123456789", 10_000) // 100,000 characters
	uni := strings.Repeat("日本語", 33_000)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 3, func(i int) string {
		return map[int]string{1: "before", 2: huge, 3: uni}[i]
	})}}})
	for _, wrap := range []bool{false, true} {
		lv.wrap = wrap
		start := time.Now()
		for i := 0; i < 20; i++ {
			_ = m.Render()
		}
		if d := time.Since(start) / 20; d > 16*time.Millisecond*raceSlowdown {
			t.Errorf("wrap=%v: a frame with a 100k-character line took %s", wrap, d)
		}
		assertWidth(t, m.Render(), m.w, fmt.Sprintf("wrap=%v", wrap))
	}
	press(m, "g", "down", "down", "pgdown")
	assertWidth(t, m.Render(), m.w, "scrolled")
}

func TestControlCharactersAreShownNotObeyed(t *testing.T) {
	m := newTestModel(t, Options{})
	lv := newLogView(m.env, jobs()[0])
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 1, func(int) string { return "evil \x1b[2J\x1b]0;pwned\x07 tab\tend" })}}})
	r := m.Render()
	if strings.Contains(r, "\x1b[2J") || strings.Contains(r, "pwned\x07") {
		t.Fatalf("a job's escape sequences reached the terminal: %q", r)
	}
	mustContain(t, screen(m), "evil", "tab    end")

	// So is the error an agent reports for the job.
	failed := job("job_evil", "acme", imsv1.JobState_JOB_STATE_FAILED, 0)
	failed.Error = "exit 1: \x1b]0;pwned\x07\x1b[2Jboom"
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{job: failed}}})
	r = m.Render()
	if strings.Contains(r, "\x1b[2J") || strings.Contains(r, "pwned\x07") {
		t.Fatalf("a job's error reached the terminal raw: %q", r)
	}
	mustContain(t, screen(m), "error: exit 1:", "boom")
}

func TestReadOnlyLeavesDangerousKeysUnbound(t *testing.T) {
	m := newTestModel(t, Options{ReadOnly: true})
	feed(m, snapshot())
	press(m, "a")
	if _, ok := m.top().(*actionsView); ok || m.mode != inputNone {
		t.Fatal("a started an action in read-only mode")
	}
	m.Update(teaSize(100, 60))
	press(m, "?")
	s := screen(m)
	mustContain(t, s, "[read-only]", "follow / pause")
	mustNotContain(t, s, "run an action", "cancel the job")

	// No view's footer offers them either.
	press(m, "?", "enter")
	mustNotContain(t, screen(m), "a action", "x cancel")
	m.Update(jobsMsg{gen: m.top().(*installView).gen, jobs: jobs()})
	press(m, "x")
	if m.confirm != nil {
		t.Fatal("x asked to cancel a job in read-only mode")
	}
	press(m, "enter")
	mustNotContain(t, screen(m), "x cancel")
	mustContain(t, screen(m), "f follow")

	rw := newTestModel(t, Options{})
	rw.Update(teaSize(100, 60))
	press(rw, "?")
	mustContain(t, screen(rw), "run an action on the install", "cancel the job")
}

// A viewer's console binds none of the dangerous keys, a support
// engineer's keeps run-action and break-glass but not cancel.
func TestRolesHideKeys(t *testing.T) {
	viewer := newTestModel(t, Options{Denied: []Action{ActRunAction, ActCancelJob, ActBreakGlass}})
	feed(viewer, snapshot())
	press(viewer, "a")
	if _, ok := viewer.top().(*actionsView); ok || viewer.mode != inputNone {
		t.Fatal("a started an action for a viewer")
	}
	viewer.Update(teaSize(100, 60))
	press(viewer, "?")
	mustNotContain(t, screen(viewer), "run an action", "cancel the job", "request break-glass")

	sup := newTestModel(t, Options{Denied: []Action{ActCancelJob}})
	sup.Update(teaSize(100, 60))
	feed(sup, snapshot())
	press(sup, "?")
	s := screen(sup)
	mustContain(t, s, "run an action on the install", "request break-glass")
	mustNotContain(t, s, "cancel the job")
}

func TestActionAsksThenRuns(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "a", "enter") // the last row: an ad-hoc script
	mustContain(t, screen(m), "Run an action on acme", "Needs permission mode: maintenance", "script:")
	press(m, "echo hi", "enter")
	mustContain(t, screen(m), "Confirm: run `echo hi` on acme")
	if cmd := press(m, "n"); cmd != nil {
		t.Fatal("n must not run anything")
	}
	mustContain(t, screen(m), "not done: run `echo hi` on acme")

	press(m, "esc", "a", "enter", "echo hi", "enter")
	if cmd := press(m, "y"); cmd == nil {
		t.Fatal("y must enqueue the action")
	}
	// The answer opens the job's log, following, even when other requests
	// went out before it came back (the watch announcing the new job
	// refreshes the install's list first, more often than not).
	gen := m.gen
	m.nextGen()
	m.Update(enqueuedMsg{gen: gen, job: job("job_new", "acme", imsv1.JobState_JOB_STATE_QUEUED, 0)})
	mustContain(t, screen(m), "job_new › logs", "action job_new queued on acme")

	// A refused enqueue says why.
	press(m, "esc", "a", "enter", "x", "enter", "y")
	m.Update(enqueuedMsg{gen: m.gen, err: connect.NewError(connect.CodePermissionDenied, errors.New("viewer tokens cannot enqueue jobs"))})
	mustContain(t, screen(m), "action not started: viewer tokens cannot enqueue jobs")
}

func TestCommandLine(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, ":", "jobs", "enter")
	if _, ok := m.top().(*jobsView); !ok {
		t.Fatalf(":jobs opens the jobs view, top is %T", m.top())
	}
	press(m, ":", "audit", "enter")
	mustContain(t, screen(m), "loading audit events")
	press(m, ":", "bogus", "enter")
	mustContain(t, screen(m), "unknown command :bogus")
	press(m, ":", "ctx a b", "enter")
	mustContain(t, screen(m), ":ctx takes one context name")
	press(m, ":", "ctx staging", "enter")
	mustContain(t, screen(m), "started with --server")
	press(m, ":", "installs", "enter")
	mustContain(t, screen(m), "NAME", "acme")

	var dialled string
	m2 := newTestModel(t, Options{Dial: nil})
	m2.opts.Dial = func(_ contextT, name string) (*Conn, error) {
		dialled = name
		return nil, errors.New("no such context")
	}
	cmd := press(m2, ":", "ctx staging", "enter")
	if cmd == nil {
		t.Fatal(":ctx NAME dials in a command")
	}
	_ = dialled
}

func TestUnreachableKeepsDataAndShowsBanner(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	m.Update(fleetMsg{gen: m.fleetGen, events: []fleetEvent{{err: connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:7070: connection refused")), retryIn: 4 * time.Second}}})
	s := screen(m)
	mustContain(t, s, "imsd unreachable, retrying in 4s; showing data from 12:00:00: dial tcp 127.0.0.1:7070", "acme", "globex")
	feed(m, &imsv1.WatchInstallsResponse{Snapshot: true, Installs: snapshot().Installs[:1]})
	s = screen(m)
	mustNotContain(t, s, "unreachable", "globex")

	m.Update(fleetMsg{gen: m.fleetGen, events: []fleetEvent{{err: connect.NewError(connect.CodeUnauthenticated, errors.New("unknown or revoked API token")), retryIn: time.Second}}})
	mustContain(t, screen(m), "imsd did not accept the token")
}

func TestSettingsErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"{\n  \"keys\": {\n    \"run_action\": [\"R\"],\n  }\n}", "console.json:4:"},
		{`{"keys": {"launch": ["l"]}}`, "keys.launch: unknown action"},
		{`{"keys": {"sort": ["/"]}}`, `keys.sort: key "/" is already bound to filter`},
		// The fleet view sorts and runs actions: one key cannot do both (issue 33, item 1).
		{`{"keys": {"run_action": ["R"], "sort": ["R"]}}`, `keys.run_action: key "R" is already bound to sort`},
		{`{"keys": {"cancel_job": ["a"]}}`, `keys.cancel_job: key "a" is already bound to run_action`},
		{`{"theme": {"accent": "blue"}}`, `theme.accent: "blue" is not a colour`},
		{`{"theme": {"accents": "#ffffff"}}`, `theme.accents: unknown colour`},
		{`{"keys": {"sort": "s"}}`, `console.json:1: keys: a []string is needed here`},
		{`{"colours": {}}`, `unknown field "colours"`},
	} {
		p := filepath.Join(dir, "console.json")
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadSettings(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
	p := filepath.Join(dir, "console.json")
	os.WriteFile(p, []byte(`{"keys": {"run_action": ["R"], "sort": ["o"]}, "theme": {"accent": "#ff0000"}}`), 0o600)
	s, err := LoadSettings(p)
	if err != nil {
		t.Fatal(err)
	}
	m := newTestModel(t, Options{Settings: s})
	feed(m, snapshot())
	press(m, "a")
	if _, ok := m.top().(*actionsView); ok || m.mode != inputNone {
		t.Fatal("a is no longer bound after rebinding run_action to R")
	}
	press(m, "R")
	if _, ok := m.top().(*actionsView); !ok {
		t.Fatal("R runs an action after rebinding")
	}
	press(m, "esc")
	m.Update(teaSize(100, 60))
	press(m, "esc", "?")
	mustContain(t, screen(m), "R                  run an action", "o                  sort by the next column")
	if _, err := LoadSettings(filepath.Join(dir, "missing.json")); err != nil {
		t.Fatalf("a missing file means defaults, got %v", err)
	}
}

// ---- goldens ----

func assertWidth(t *testing.T, out string, w int, what string) {
	t.Helper()
	for i, l := range strings.Split(out, "\n") {
		if lw := ansi.StringWidth(l); lw > w {
			t.Errorf("%s: line %d is %d columns wide, more than %d: %q", what, i+1, lw, w, ansi.Strip(l))
		}
	}
}

func TestGoldens(t *testing.T) {
	views := map[string]func(m *Model){
		"fleet": func(m *Model) {},
		"fleet-filtered": func(m *Model) {
			press(m, "/", "region=eu-west-1", "enter")
		},
		"fleet-selector": func(m *Model) {
			press(m, "/", "ring in (canary,prod),!legacy", "enter")
		},
		"install": func(m *Model) {
			press(m, "enter")
			m.Update(jobsMsg{gen: m.top().(*installView).gen, jobs: jobs()})
			feedInstallParts(m)
		},
		// The ARTIFACTS section: an image, and the plugin releases the
		// install's agent pinned (one verified, one refused).
		"install-artifacts": func(m *Model) {
			press(m, "enter")
			v := m.top().(*installView)
			m.Update(jobsMsg{gen: v.gen})
			feedInstallParts(m)
			m.Update(artifactsMsg{gen: v.artifactsGen, artifacts: artifactsFixture()})
			press(m, "end")
		},
		"jobs": func(m *Model) {
			press(m, ":", "jobs", "enter")
			m.Update(jobsMsg{gen: m.top().(*jobsView).gen, jobs: jobs()})
		},
		"logs": func(m *Model) {
			lv := newLogView(m.env, jobs()[0])
			m.push(lv)
			m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 40, func(i int) string {
				if i == 38 {
					return strings.Repeat("a very long line ", 20)
				}
				return fmt.Sprintf("step %d: migrating table_%d", i, i)
			})}}})
		},
		"logs-wrap-time": func(m *Model) {
			lv := newLogView(m.env, jobs()[0])
			m.push(lv)
			m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 40, func(i int) string {
				if i == 38 {
					return strings.Repeat("a very long line ", 20)
				}
				return fmt.Sprintf("step %d: migrating table_%d", i, i)
			})}}})
			press(m, "w", "t")
		},
		"logs-saved": func(m *Model) {
			lv := newLogView(m.env, jobs()[0])
			m.push(lv)
			m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 40, func(i int) string { return fmt.Sprintf("step %d", i) })}}})
			press(m, "ctrl+s") // the command, not run here, would write the file
			m.Update(savedLogMsg{gen: lv.saveGen, path: "/var/log/byoc/" + lv.job.Id + "-1.log", n: 40})
		},
		"help":    func(m *Model) { press(m, "?") },
		"confirm": func(m *Model) { press(m, "a", "enter", "./migrate.sh --dry-run", "enter") },
		"script":  func(m *Model) { press(m, "a", "enter") },
		"audit":   func(m *Model) { press(m, ":", "audit", "enter") },
		"install-failed": func(m *Model) {
			failedInstall(m)
		},
		// An agent imsd's health sweeper found offline: since when, why.
		"install-agent-offline": func(m *Model) {
			press(m, "j", "enter")
			m.Update(jobsMsg{gen: m.top().(*installView).gen})
		},
		"install-end": func(m *Model) {
			failedInstall(m)
			press(m, "end")
		},
		"audit-filtered": func(m *Model) {
			auditEvents(m)
			press(m, "/", "kind=job.cancel_requested", "enter")
		},
		"audit-detail": func(m *Model) {
			auditEvents(m)
			press(m, "/", "cancel", "enter", "enter")
		},
		"actions-grant": func(m *Model) {
			grantActions(m)
		},
		"confirm-breakglass": func(m *Model) {
			grantActions(m)
			press(m, "down", "enter", "acm", "enter")
		},
		"yaml": func(m *Model) { press(m, "y") },
		"workflows": func(m *Model) {
			press(m, ":", "workflows", "enter")
			v := m.top().(*tableView[*imsv1.Workflow])
			m.Update(tableMsg[*imsv1.Workflow]{gen: v.gen, rows: workflowsFixture()})
		},
		"releases": func(m *Model) {
			press(m, ":", "releases", "enter")
			v := m.top().(*tableView[*imsv1.Release])
			m.Update(tableMsg[*imsv1.Release]{gen: v.gen, rows: []*imsv1.Release{releaseFixture()}})
		},
		"release": func(m *Model) { openRelease(m) },
		"apps": func(m *Model) {
			press(m, ":", "apps", "enter")
			v := m.top().(*tableView[*imsv1.App])
			m.Update(tableMsg[*imsv1.App]{gen: v.gen, rows: []*imsv1.App{{Id: "app_shop", Name: "shop", Description: "the demo shop"}, {Id: "app_billing", Name: "billing"}}})
		},
		"breakglass": func(m *Model) {
			press(m, ":", "breakglass", "enter")
			v := m.top().(*tableView[*imsv1.BreakGlassGrant])
			m.Update(tableMsg[*imsv1.BreakGlassGrant]{gen: v.gen, rows: []*imsv1.BreakGlassGrant{liveGrant(time.Hour)}})
		},
		"ctx": func(m *Model) {
			m.opts.Contexts = func() ([]ContextInfo, error) { return nil, nil }
			press(m, ":", "ctx", "enter")
			v := m.top().(*tableView[ContextInfo])
			m.Update(tableMsg[ContextInfo]{gen: v.gen, rows: []ContextInfo{{Name: "prod", Server: "https://ims.example.com", Current: true}, {Name: "staging", Server: "https://staging.example.com"}}})
		},
		"describe-job": func(m *Model) {
			press(m, ":", "jobs", "enter")
			m.Update(jobsMsg{gen: m.top().(*jobsView).gen, jobs: jobs()})
			press(m, "down", "d")
		},
		"offline": func(m *Model) {
			m.Update(fleetMsg{gen: m.fleetGen, events: []fleetEvent{{err: connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), retryIn: 8 * time.Second}}})
		},
	}
	// A support engineer signed in with single sign-on: the header says
	// who, and the keys are those the role allows on the selected row's
	// install: on acme (ring=canary) run-action and break-glass, on
	// globex none.
	support := Options{
		Conn: &Conn{Context: "prod", Server: "https://ims.example.com", Identity: "ann@vendor.example (support on installs with labels ring=canary)",
			Access: NewAccess([]*imsv1.RoleGrant{{Role: imsv1.Role_ROLE_SUPPORT, Scope: "selector:ring=canary"}}),
			Client: imsv1connect.NewOperatorServiceClient(http.DefaultClient, "http://127.0.0.1:1")}}
	viewOpts := map[string]Options{"fleet-signed-in": support, "fleet-signed-in-other-row": support, "help-support": support}
	views["fleet-signed-in"] = func(m *Model) {}
	views["fleet-signed-in-other-row"] = func(m *Model) { press(m, "down") }
	views["help-support"] = func(m *Model) { press(m, "?") }
	for name, setup := range views {
		for _, w := range []int{40, 80, 120, 200} {
			t.Run(fmt.Sprintf("%s-%d", name, w), func(t *testing.T) {
				m := newTestModel(t, viewOpts[name])
				m.Update(teaSize(w, 24))
				feed(m, snapshot())
				setup(m)
				raw := m.Render()
				assertWidth(t, raw, w, name)
				if got := strings.Count(raw, "\n") + 1; got != 24 {
					t.Errorf("%d lines, want the window's 24", got)
				}
				got := ansi.Strip(raw)
				path := filepath.Join("testdata", fmt.Sprintf("%s-%d.golden", name, w))
				if updating() {
					os.MkdirAll("testdata", 0o755)
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test ./tui/console -run TestGoldens -update)", err)
				}
				if got != string(want) {
					t.Errorf("render differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
				}
			})
		}
	}
}

// TestIncrementalUpdatesMatchAFullSort applies random changes one by one
// and checks the rows against a fresh sort and filter of the same data.
func TestIncrementalUpdatesMatchAFullSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for sortBy := range sortKeys {
		for _, filter := range []string{"", "shop", "agent=online"} {
			f := newFleet()
			f.sortBy, f.filter, f.reverse = sortBy, filter, sortBy%2 == 1
			var all []*imsv1.InstallStatus
			for i := 0; i < 200; i++ {
				all = append(all, status(fmt.Sprintf("i%03d", i), []string{"shop", "billing"}[i%2], []string{"online", "offline", "none"}[i%3],
					time.Duration(rng.IntN(100))*time.Second, int32(rng.IntN(3)), int32(rng.IntN(3)), nil))
			}
			f.apply([]*imsv1.WatchInstallsResponse{{Snapshot: true, Installs: all}})
			steps := 500
			if testing.Short() {
				steps = 100
			}
			for step := 0; step < steps; step++ {
				r := &imsv1.WatchInstallsResponse{}
				switch k := rng.IntN(10); {
				case k == 0:
					r.RemovedInstallIds = []string{fmt.Sprintf("ins_i%03d", rng.IntN(220))}
				default:
					i := rng.IntN(220) // some are new
					r.Installs = []*imsv1.InstallStatus{status(fmt.Sprintf("i%03d", i), []string{"shop", "billing"}[rng.IntN(2)],
						[]string{"online", "offline", "none"}[rng.IntN(3)], time.Duration(rng.IntN(100))*time.Second, int32(rng.IntN(3)), int32(rng.IntN(3)), nil)}
				}
				f.apply([]*imsv1.WatchInstallsResponse{r})
				g := newFleet()
				g.sortBy, g.filter, g.reverse = f.sortBy, f.filter, f.reverse
				g.byID = f.byID
				g.resort()
				if !slices.Equal(names(f.visible), names(g.visible)) || len(f.sorted) != len(f.byID) {
					t.Fatalf("sort %s filter %q step %d: incremental rows differ from a full sort:\n%v\n%v", sortKeys[sortBy], filter, step, names(f.visible), names(g.visible))
				}
			}
		}
	}
}

func names(rows []*imsv1.InstallStatus) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Install.Name
	}
	return out
}

// TestKeyScopesCoverHints keeps each action's scope, which decides which
// key bindings conflict, true to the views that offer it: an action a
// view lists in its footer has that view in its scope.
func TestKeyScopesCoverHints(t *testing.T) {
	scopes := map[Action]string{}
	for _, d := range keyDefaults {
		scopes[d.act] = d.scope
	}
	for name, v := range map[string]hinted{"fleet": &fleetView{}, "install": &installView{}, "jobs": &jobsView{}, "logs": &logView{}, "lists": &objectView{}} {
		for _, a := range v.Hints() {
			if !scopesOverlap(scopes[a], name) {
				t.Errorf("the %s view offers %s, whose scope is %q", name, a, scopes[a])
			}
		}
	}
}

// TestREADMEKeyMap keeps the console guide's key map and console.json
// names true (docs/operator/console.md; the README's before the docs split).
func TestREADMEKeyMap(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator", "console.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	for _, d := range keyDefaults {
		if !strings.Contains(readme, " "+string(d.act)+" ") && !strings.Contains(readme, "`"+string(d.act)+" ") && !strings.Contains(readme, " "+string(d.act)+"`") {
			t.Errorf("README does not name the action %s", d.act)
		}
		for _, k := range d.keys {
			if !strings.Contains(readme, "`"+k+"`") {
				t.Errorf("README's key map lacks %s's key %q", d.act, k)
			}
		}
	}
	for name := range themeDefaults {
		if !strings.Contains(readme, name) {
			t.Errorf("README does not name the colour %s", name)
		}
	}
}

func TestBurstsAreCoalescedIntoOneMessage(t *testing.T) {
	ch := make(chan logChunk, 500)
	for i := 0; i < 300; i++ {
		ch <- logChunk{lines: logLines(i+1, i+1, func(int) string { return "x" })}
	}
	msg := nextBatch(ch, 256, func(c []logChunk, closed bool) tea.Msg { return logMsg{gen: 7, chunks: c, closed: closed} })().(logMsg)
	if len(msg.chunks) != 256 || msg.closed {
		t.Fatalf("first batch has %d chunks (closed %v), want 256 waiting ones at once", len(msg.chunks), msg.closed)
	}
	close(ch)
	msg = nextBatch(ch, 256, func(c []logChunk, closed bool) tea.Msg { return logMsg{gen: 7, chunks: c, closed: closed} })().(logMsg)
	if len(msg.chunks) != 44 || !msg.closed {
		t.Fatalf("second batch has %d chunks (closed %v), want the other 44 and the end", len(msg.chunks), msg.closed)
	}
}

func TestContextSwitchStartsAfresh(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "enter")
	old := m.fleetGen
	other := &Conn{Context: "staging", Server: "https://staging.example.com", Client: m.conn.Client}
	m.Update(ctxMsg{conn: other})
	s := screen(m)
	mustContain(t, s, "byoc staging (https://staging.example.com)", "switched to context staging", "loading installs")
	mustNotContain(t, s, "acme")
	if m.fleetGen == old {
		t.Fatal("a new context needs a new watch generation")
	}
	m.Update(ctxMsg{err: errors.New(`context "nope" not found in /home/op/.config/byoc/config.json`)})
	mustContain(t, screen(m), `context "nope" not found`)
}

// TestHelpScrolls: the help screen (a bubbles viewport) scrolls with the
// list keys and stops at its last line, so up moves at once after
// scrolling past the end.
func TestHelpScrolls(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(80, 12))
	press(m, "?")
	mustContain(t, screen(m), "Keys  (from the live bindings")
	press(m, "j", "j")
	s := screen(m)
	mustNotContain(t, s, "Keys  (from the live bindings")
	mustContain(t, s, "GLOBAL")
	for i := 0; i < 100; i++ {
		press(m, "j")
	}
	mustContain(t, screen(m), "cancel the release")
	press(m, "k")
	mustNotContain(t, screen(m), "cancel the release")
	press(m, "?")
	mustContain(t, screen(m), "loading installs")
}

// fakeNav records what views ask of the console around them.
type fakeNav struct {
	pushed  []view
	status  string
	actions []string
	scripts []string
	cancels []string
	asked   []string
}

func (n *fakeNav) push(v view) tea.Cmd { n.pushed = append(n.pushed, v); return nil }
func (n *fakeNav) setStatus(_ bool, format string, args ...any) {
	n.status = fmt.Sprintf(format, args...)
}
func (n *fakeNav) startAction(s *imsv1.InstallStatus) tea.Cmd {
	n.actions = append(n.actions, s.Install.Name)
	return nil
}
func (n *fakeNav) startBreakGlass(s *imsv1.InstallStatus) tea.Cmd {
	n.actions = append(n.actions, "break-glass "+s.Install.Name)
	return nil
}
func (n *fakeNav) startShell(s *imsv1.InstallStatus) tea.Cmd {
	n.actions = append(n.actions, "shell "+s.Install.Name)
	return nil
}
func (n *fakeNav) startScript(s *imsv1.InstallStatus) tea.Cmd {
	n.scripts = append(n.scripts, s.Install.Name)
	return nil
}
func (n *fakeNav) confirmCancel(j *imsv1.Job) tea.Cmd {
	n.cancels = append(n.cancels, j.Id)
	return nil
}
func (n *fakeNav) ask(title string, _ []string, _ func() tea.Cmd) tea.Cmd {
	n.asked = append(n.asked, title)
	return nil
}
func (n *fakeNav) askTyped(title string, _ []string, typed string, _ func() tea.Cmd) tea.Cmd {
	n.asked = append(n.asked, title+" typing "+typed)
	return nil
}
func (n *fakeNav) grant(string) *imsv1.BreakGlassGrant { return nil }
func (n *fakeNav) switchContext(string) tea.Cmd        { return nil }
func (n *fakeNav) copyID(string, string) tea.Cmd       { return nil }

// TestViewsWorkAlone drives views as components, without the console
// around them: sized, fed, keyed, and asking a fake nav for what is not
// theirs.
func TestViewsWorkAlone(t *testing.T) {
	e := newTestModel(t, Options{}).env
	nav := &fakeNav{}
	e.nav = nav
	e.fleet.apply([]*imsv1.WatchInstallsResponse{snapshot()})
	key := func(v view, keys ...string) {
		for _, k := range keys {
			for _, msg := range keyMsgs(k) {
				v.Update(msg)
			}
		}
	}

	fv := rootViews[0].open(e)
	fv.SetSize(60, 10)
	fv.Update(fleetChangedMsg{})
	mustContain(t, stripANSI(fv.View()), "NAME↑", "acme", "globex")
	key(fv, "j", "s")
	if nav.status != "sorted by app" {
		t.Fatalf("s asks for the status line %q", nav.status)
	}
	key(fv, "a")
	key(fv, "enter")
	if len(nav.actions) != 1 || nav.actions[0] != "globex" || len(nav.pushed) != 1 {
		t.Fatalf("fleet view asked for actions %v and pushed %d views; want globex and its install view", nav.actions, len(nav.pushed))
	}

	iv, ok := nav.pushed[0].(*installView)
	if !ok {
		t.Fatalf("enter pushed %T, want the install view", nav.pushed[0])
	}
	iv.SetSize(60, 30)
	iv.Init()
	iv.Update(jobsMsg{gen: iv.gen, jobs: jobs()})
	mustContain(t, stripANSI(iv.View()), "globex", "JOBS (3)", "job_run")
	key(iv, "j", "x", "enter")
	if len(nav.cancels) != 1 || nav.cancels[0] != "job_ok" || len(nav.pushed) != 2 {
		t.Fatalf("install view asked to cancel %v and pushed %d views; want job_ok and its log", nav.cancels, len(nav.pushed))
	}
	iv.Close()
	if iv.ctx.Err() == nil {
		t.Fatal("Close cancels the view's requests")
	}

	for _, r := range rootViews {
		v := r.open(e)
		v.SetSize(40, 5)
		v.Init()
		v.Update(fleetChangedMsg{})
		if v.Title() == "" || v.View() == "" {
			t.Errorf(":%s opens a view without a title or a body", r.names[0])
		}
		if c, ok := v.(closer); ok {
			c.Close()
		}
	}
}

// TestViewOnlyReads: rendering leaves the lists' cursor and window as
// Update left them, and Update (a smaller window here) keeps the cursor's
// row on screen.
func TestViewOnlyReads(t *testing.T) {
	m := newTestModel(t, Options{})
	snap := &imsv1.WatchInstallsResponse{Snapshot: true}
	for i := 0; i < 60; i++ {
		snap.Installs = append(snap.Installs, status(fmt.Sprintf("i%02d", i), "shop", "online", time.Second, 0, 0, nil))
	}
	feed(m, snap)
	press(m, "G", "k", "pgup")
	fv := m.top().(*fleetView)
	for _, size := range []tea.WindowSizeMsg{teaSize(100, 24), teaSize(100, 8), teaSize(40, 30)} {
		m.Update(size)
		before := fv.list
		s := screen(m)
		screen(m)
		if fv.list != before {
			t.Fatalf("%dx%d: rendering moved the list from %+v to %+v", size.Width, size.Height, before, fv.list)
		}
		mustContain(t, s, fv.fleet.visible[fv.pos].Install.Name)
	}

	press(m, ":", "jobs", "enter")
	jv := m.top().(*jobsView)
	var many []*imsv1.Job
	for i := 0; i < 50; i++ {
		many = append(many, job(fmt.Sprintf("job_%02d", i), "i01", imsv1.JobState_JOB_STATE_SUCCEEDED, time.Minute))
	}
	m.Update(jobsMsg{gen: jv.gen, jobs: many})
	press(m, "G")
	before := jv.list
	s := screen(m)
	if jv.list != before || !strings.Contains(s, "job_49") {
		t.Fatalf("jobs: rendering moved the list from %+v to %+v, or job_49 is off screen:\n%s", before, jv.list, s)
	}
}

// TestBannersTakeTheirLines: every banner in the header takes a line from
// the body, so the screen stays the window's height with the break-glass
// line and the unreachable one both shown.
func TestBannersTakeTheirLines(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "enter") // acme
	m.bg = bgState{me: "ops", grants: map[string][]*imsv1.BreakGlassGrant{"ins_acme": {liveGrant(15 * time.Minute)}}}
	m.Update(fleetMsg{gen: m.fleetGen, events: []fleetEvent{{err: connect.NewError(connect.CodeUnavailable, errors.New("connection refused")), retryIn: time.Second}}})
	for _, h := range []int{6, 24} {
		m.Update(teaSize(80, h))
		s := screen(m)
		if n := strings.Count(s, "\n") + 1; n != h {
			t.Fatalf("%d lines on a %d-line window:\n%s", n, h, s)
		}
		mustContain(t, s, "BREAK-GLASS", "imsd unreachable", "installs")
	}
}

// The script's confirmation warns when the install's agent reported
// maintenance off (globex in the fixture) or every job disabled
// (umbrella), and says nothing more for an install with it on (acme).
func TestActionWarnsWhenTheCustomerTurnedItOff(t *testing.T) {
	for _, c := range []struct {
		install, keys, want string
	}{
		{"acme", "", ""},
		{"globex", "j", "The customer has maintenance turned off: the agent will refuse it."},
		{"umbrella-corporation-eu-central-production", "G", "The customer has disabled all jobs: the agent will refuse it."},
	} {
		t.Run(c.install, func(t *testing.T) {
			m := newTestModel(t, Options{})
			feed(m, snapshot())
			if c.keys != "" {
				press(m, c.keys)
			}
			press(m, "a", "enter", "echo hi", "enter")
			s := screen(m)
			mustContain(t, s, "Confirm: run `echo hi` on "+c.install)
			if c.want != "" {
				mustContain(t, s, c.want)
			} else if strings.Contains(s, "will refuse it") {
				t.Fatalf("a warning for an install with maintenance on:\n%s", s)
			}
		})
	}
}

// Esc clears an applied filter (README: "back one level / clear filter"),
// `/` opens on the filter in force, and a log search's status leaves with
// the log.
func TestEscClearsAppliedFilterAndSlashEditsIt(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "/", "tier=gold", "enter")
	mustContain(t, screen(m), "acme", "1 of 4")
	mustNotContain(t, screen(m), "globex")

	press(m, "/")
	mustContain(t, screen(m), "filter: tier=gold")
	press(m, "backspace", "backspace", "backspace", "backspace", "silver", "enter")
	s := screen(m)
	mustContain(t, s, "globex", "/tier=silver")
	mustNotContain(t, s, "acme")

	press(m, "esc")
	s = screen(m)
	mustContain(t, s, "acme", "globex")
	mustNotContain(t, s, "tier=silver", "of 4")
	if _, ok := m.top().(*fleetView); !ok {
		t.Fatalf("esc on a filter clears it and stays, top is %T", m.top())
	}

	lv := newLogView(m.env, jobs()[0])
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 20, func(i int) string { return fmt.Sprintf("line %03d", i) })}}})
	press(m, "/", "line 01", "enter")
	mustContain(t, screen(m), "match 1 of")
	press(m, "esc")
	mustNotContain(t, screen(m), "match 1 of", "/line 01")
}

// The fleet shows each install's state, health and revision; both new
// columns sort (failed and unhealthy first) and filter (state=, health=).
func TestFleetStateAndHealthSortAndFilter(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 24))
	feed(m, snapshot())
	s := screen(m)
	mustContain(t, s, "STATE", "HEALTH", "active", "failed", "deprovisioned", "healthy", "unhealthy")
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "acme ") && !strings.Contains(l, " 3 ") {
			t.Errorf("acme at revision 3 shows no revision: %q", l)
		}
	}
	firstRow := func() string {
		for _, l := range strings.Split(screen(m), "\n") {
			if f := strings.Fields(l); len(f) > 0 && slices.Contains([]string{"acme", "globex", "initech"}, f[0]) ||
				strings.HasPrefix(l, "umbrella") {
				return f[0]
			}
		}
		return ""
	}
	press(m, "s", "s") // name → app → state
	mustContain(t, screen(m), "STATE↑", "sorted by state")
	if got := firstRow(); got != "globex" {
		t.Errorf("sorted by state, the failed install comes first, got %q", got)
	}
	press(m, "s") // health
	mustContain(t, screen(m), "HEALTH↑")
	if got := firstRow(); got != "globex" {
		t.Errorf("sorted by health, the unhealthy install comes first, got %q", got)
	}

	press(m, "/", "state=active", "enter")
	s = screen(m)
	mustContain(t, s, "acme", "1 of 4")
	mustNotContain(t, s, "globex", "initech")
	press(m, "esc", "/", "health=unhealthy", "enter")
	s = screen(m)
	mustContain(t, s, "globex", "1 of 4")
	mustNotContain(t, s, "acme")
}

// HEARTBEAT means what it says: imsd writes an agent's last-seen time only
// once per lease, so a connected agent's reads up to a lease old (38 s
// with a 10 s heartbeat); while the stream is live the console says
// "now", and for an agent that has gone, when it was last heard.
func TestHeartbeatIsNowWhileConnected(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 24))
	live := status("acme", "shop", "online", 38*time.Second, 0, 0, nil)
	gone := status("globex", "shop", "offline", 38*time.Second, 0, 0, nil)
	feed(m, &imsv1.WatchInstallsResponse{Snapshot: true, Installs: []*imsv1.InstallStatus{live, gone}})
	s := screen(m)
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "acme ") && (!strings.Contains(l, " now ") || strings.Contains(l, "38s")) {
			t.Errorf("a connected agent's heartbeat should read now: %q", l)
		}
		if strings.HasPrefix(l, "globex ") && !strings.Contains(l, "38s ago") {
			t.Errorf("a gone agent's heartbeat should be when it was heard: %q", l)
		}
	}
	press(m, "enter")
	mustContain(t, screen(m), "last heard now")
}

// `a` lists the app's actions first (name, mode, description), the ad-hoc
// script last; enter on an action asks, then starts an action run.
func TestActionPickerListsTheAppsActionsFirst(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, "a")
	av, ok := m.top().(*actionsView)
	if !ok {
		t.Fatalf("a opens the install's actions, top is %T", m.top())
	}
	mustContain(t, screen(m), "Run an action on acme", "loading the app's actions", "ad-hoc script…")
	m.Update(actionsMsg{gen: av.gen, revision: 3, actions: []*imsv1.Action{
		{Name: "migrate", Mode: "maintenance", Description: "run the migrations"},
		{Name: "rotate-keys", Mode: "break_glass", Description: "rotate the signing keys"},
	}})
	s := screen(m)
	mustContain(t, s, "revision 3", "migrate", "run the migrations", "rotate-keys", "break_glass", "ad-hoc script…")
	if strings.Index(s, "rotate-keys") > strings.Index(s, "ad-hoc script") || strings.Index(s, "migrate") > strings.Index(s, "rotate-keys") {
		t.Fatalf("the app's actions come first, the ad-hoc script last:\n%s", s)
	}

	press(m, "down", "enter")
	mustContain(t, screen(m), "Confirm: run action rotate-keys on acme", "Needs permission mode: break_glass")
	if cmd := press(m, "acme", "enter"); cmd == nil {
		t.Fatal("typing the install's name must start the break_glass action run")
	}
	m.Update(actionRunMsg{gen: av.startGen, run: &imsv1.ActionRun{Id: "wf_1", Action: "rotate-keys"}})
	mustContain(t, screen(m), "action rotate-keys started on acme (wf_1)")

	press(m, "down", "enter") // the ad-hoc script, as before
	if m.mode != inputScript {
		t.Fatal("the last row asks for a script")
	}
}

// The install view shows what exists instead of "arrives later": the
// revision, the components (state, last deploy, outputs of their job),
// the newest workflow with each step's state, read again when the fleet
// says the install changed, and the app's actions.
func TestInstallViewShowsComponentsWorkflowAndActions(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	mustContain(t, screen(m), "revision 3", "state active", "health healthy", "COMPONENTS", "WORKFLOW", "ACTIONS", "loading…")
	js := append(jobs(), &imsv1.Job{Id: "job_db", InstallId: "ins_acme", ComponentType: "terraform", Operation: "apply",
		State: imsv1.JobState_JOB_STATE_SUCCEEDED, Outputs: map[string]string{"url": "pg://db", "port": "5432"}, CreateTime: jobs()[0].CreateTime})
	m.Update(jobsMsg{gen: v.gen, jobs: js})
	feedInstallParts(m)
	s := screen(m)
	mustNotContain(t, s, "arrive with", "loading…")
	for _, want := range [][]string{
		{"db", "succeeded", "provision rev 3, 50m ago", "outputs port=5432 url=pg://db"},
		{"api", "succeeded", "provision rev 3"},
		{"wf_2", "action", "running", "rev 3"},
		{"succeeded", "backup"},
		{"running", "migrate", "run"},
		{"migrate", "maintenance", "run the migrations"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	// The fleet saying acme changed reads its workflows (and jobs) again.
	old := v.wfGen
	if cmd := feed(m, &imsv1.WatchInstallsResponse{Installs: []*imsv1.InstallStatus{m.fleet.byID["ins_acme"]}}); cmd == nil || v.wfGen == old {
		t.Fatal("a change to the install must read its workflows again")
	}
}

// The install view shows the components' drift state once imsd has one,
// and leaves the section out while there is none.
func TestInstallViewShowsDrift(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	m.Update(driftMsg{gen: v.driftGen})
	mustNotContain(t, screen(m), "DRIFT")
	checked := timestamppb.New(m.now.Add(-5 * time.Minute))
	m.Update(driftMsg{gen: v.driftGen, drift: []*imsv1.ComponentDrift{
		{Component: "db", Status: "drifted", CheckTime: checked, Schedule: "@hourly",
			Changes: []*imsv1.PlannedChange{{Address: "local_file.cfg", Action: "update"}}},
		{Component: "api", Status: "in_sync", CheckTime: checked},
		{Component: "web", Status: "failed", Error: "boom\x1b[2J"},
	}})
	s := screen(m)
	for _, want := range [][]string{
		{"DRIFT"},
		{"db", "drifted", "checked 5m ago, 1 changes", "schedule @hourly"},
		{"api", "in sync", "checked 5m ago"},
		{"web", "failed", "boom"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	mustNotContain(t, s, "\x1b[2J")
	// An answer to an earlier request is dropped.
	m.Update(driftMsg{gen: v.driftGen - 1, drift: []*imsv1.ComponentDrift{{Component: "stale", Status: "drifted"}}})
	mustNotContain(t, screen(m), "stale")
}

// screenLine reports whether one line of s holds every part.
func screenLine(s string, parts ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestAuditViewShowsEventsNewestFirst: :audit lists what imsd answers,
// newest first, names installs, drops an event it already holds, keeps
// polling, and drops an answer to an earlier request.
func TestAuditViewShowsEventsNewestFirst(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(120, 24))
	feed(m, snapshot())
	press(m, ":", "audit", "enter")
	v, ok := m.top().(*auditView)
	if !ok {
		t.Fatalf(":audit opens the audit view, top is %T", m.top())
	}
	now := m.now.UnixNano()
	ev := func(chain string, seq int64, ago time.Duration, kind string) *imsv1.AuditEvent {
		return &imsv1.AuditEvent{Chain: chain, Seq: seq, AtUnixNano: now - int64(ago), Kind: kind, Actor: "token:ci", Subject: "job:j" + fmt.Sprint(seq)}
	}
	inst := snapshot().Installs[0].Install
	_, cmd := m.Update(auditMsg{gen: v.gen, events: []*imsv1.AuditEvent{ev(inst.Id, 1, 3*time.Minute, "job.queued"), ev("", 1, time.Minute, "token.created")}})
	if cmd == nil {
		t.Fatal("no poll scheduled after an answer")
	}
	s := screen(m)
	mustContain(t, s, "token.created", "job.queued", "vendor", inst.Name)
	if strings.Index(s, "token.created") > strings.Index(s, "job.queued") {
		t.Errorf("older event above the newer one:\n%s", s)
	}
	m.Update(auditMsg{gen: v.gen, events: []*imsv1.AuditEvent{ev("", 1, time.Minute, "token.created"), ev(inst.Id, 2, 0, "job.acked")}})
	s = screen(m)
	if n := strings.Count(s, "token.created"); n != 1 {
		t.Errorf("token.created shown %d times:\n%s", n, s)
	}
	mustContain(t, s, "job.acked")
	m.Update(auditMsg{gen: v.gen - 1, events: []*imsv1.AuditEvent{ev(inst.Id, 9, 0, "stale.answer")}})
	if strings.Contains(screen(m), "stale.answer") {
		t.Error("an answer to an earlier request was shown")
	}
}

// An agent whose identity two processes share shows `conflict` in the
// AGENT column, not `online`.
func TestFleetShowsAnIdentityConflict(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 24))
	snap := snapshot()
	for _, s := range snap.Installs {
		if s.Install.Name == "acme" {
			s.Install.Agent.IdentityConflict = "two agentd processes share this agent's identity"
		}
	}
	feed(m, snap)
	for _, l := range strings.Split(screen(m), "\n") {
		if strings.HasPrefix(l, "acme ") {
			if !strings.Contains(l, "conflict") || strings.Contains(l, "online") {
				t.Fatalf("acme's row = %q, want the agent shown as conflict", l)
			}
			return
		}
	}
	t.Fatalf("no acme row:\n%s", screen(m))
}

// The install view's workflow shows each component's plan under its
// step: state, digest, counts, whether it is approved, awaits approval or
// changed since, and the changes (control characters of plugin text
// shown, not obeyed).
func TestInstallViewShowsPlans(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	d1, d2 := "sha256:"+strings.Repeat("ab", 32), "sha256:"+strings.Repeat("cd", 32)
	wf := &imsv1.Workflow{Id: "wf_3", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE, State: imsv1.WorkflowState_WORKFLOW_STATE_AWAITING_APPROVAL,
		AppRevision: 4, CreateTime: jobs()[0].CreateTime,
		Steps: []*imsv1.WorkflowStep{
			{Name: "db", Component: "db", Operation: "apply", State: imsv1.StepState_STEP_STATE_SUCCEEDED, PlanJobId: "job_p1",
				PlanState: "planned", PlanDigest: d1, ApprovedPlanDigest: d1},
			{Name: "api", Component: "api", Operation: "apply", State: imsv1.StepState_STEP_STATE_PENDING, PlanJobId: "job_p2",
				PlanState: "planned", PlanDigest: d2},
			{Name: "web", Component: "web", Operation: "apply", State: imsv1.StepState_STEP_STATE_PENDING, PlanJobId: "job_p3",
				PlanState: "failed", PlanError: "no credentials"},
		}}
	m.Update(workflowsMsg{gen: v.wfGen, newest: wf, plans: map[string]stepPlan{
		"job_p1": newStepPlan(nil, nil),
		"job_p2": newStepPlan([]*imsv1.PlannedChange{{Address: "Deployment/api", Action: "update", Summary: "replicas 2 \x1b[31m→ 3"},
			{Address: "Service/api", Action: "create"}}, nil),
	}})
	s := screen(m)
	for _, want := range [][]string{
		{"wf_3", "update", "awaiting approval", "rev 4"},
		{"plan planned sha256:abababababab", "no changes", "approved"},
		{"plan planned sha256:cdcdcdcdcdcd", "1 to create, 1 to update", "awaiting approval"},
		{"~ Deployment/api: replicas 2 \ufffd[31m→ 3"},
		{"+ Service/api"},
		{"plan failed"},
		{"no credentials"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b[31m→") {
		t.Error("a plugin's escape sequence reached the screen")
	}
}

// The install view's audit panel shows the newest events of the install's
// own chain, asks for them again on its own timer (live) and when the
// fleet says the install changed, and drops answers to older requests.
func TestInstallViewAuditPanel(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	s := screen(m)
	for _, want := range [][]string{
		{"AUDIT", "newest 5, live"},
		{"1m ago", "step.started", "imsd", "workflow:wf_2/migrate"},
		{"2m ago", "job.finished", "agent:agt_1", "job:job_ok"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	if strings.Index(s, "step.started") > strings.Index(s, "job.finished") {
		t.Errorf("newest first:\n%s", s)
	}
	// The answer starts the panel's timer; the timer asks again.
	gen := v.auGen
	_, cmd := m.Update(auditMsg{gen: gen, events: []*imsv1.AuditEvent{
		{Chain: "ins_acme", Seq: 13, AtUnixNano: clock.UnixNano(), Kind: "job.acked", Actor: "agent:agt_1", Subject: "job:job_run"},
	}})
	if cmd == nil {
		t.Fatal("an answer must start the panel's poll timer")
	}
	mustContain(t, screen(m), "job.acked", "job:job_run")
	if m.Update(auditPanelPollMsg{gen: gen}); v.auGen == gen {
		t.Fatal("the poll timer must ask for the events again")
	}
	// An answer to the older request is dropped.
	m.Update(auditMsg{gen: gen, events: []*imsv1.AuditEvent{{Chain: "ins_acme", Seq: 1, Kind: "stale.event"}}})
	mustNotContain(t, screen(m), "stale.event")
	// A failed read says so.
	m.Update(auditMsg{gen: v.auGen, err: errors.New("imsd unreachable")})
	mustContain(t, screen(m), "cannot list audit events")
}

// The job view shows a job's policy findings (denials first, at most
// maxPolicyLines) above its log, and a job cancelled before it started
// says so instead of an empty log.
func TestJobViewShowsPolicyFindingsAndWhyNoLog(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 40))
	feed(m, snapshot())
	j := jobs()[2] // failed
	j.Error = "policy denied the plan"
	j.PolicyFindings = []*imsv1.PolicyFinding{
		{Policy: "policies/tags.rego", Source: "vendor", Level: "warn", Message: "bucket lacks a cost tag"},
		{Policy: "/etc/byoc/policy/public.rego", Source: "customer", Level: "deny", Message: "public \x1b[31mbucket"},
	}
	lv := newLogView(m.env, j)
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 3, func(i int) string { return fmt.Sprintf("line %03d", i) })}}})
	s := screen(m)
	deny := strings.Index(s, "policy deny [customer] /etc/byoc/policy/public.rego: public \ufffd[31mbucket")
	warn := strings.Index(s, "policy warn [vendor] policies/tags.rego: bucket lacks a cost tag")
	if deny < 0 || warn < 0 || deny > warn {
		t.Errorf("want the deny, then the warning:\n%s", s)
	}
	mustContain(t, s, "line 003")

	many := jobs()[2]
	for i := range 6 {
		many.PolicyFindings = append(many.PolicyFindings, &imsv1.PolicyFinding{Policy: "p.rego", Source: "vendor", Level: "warn", Message: fmt.Sprintf("finding %d", i)})
	}
	lv.setJob(many)
	s = screen(m)
	mustContain(t, s, "finding 2", "policy: … 3 more (byoc job get job_bad)", "line 003")
	mustNotContain(t, s, "finding 3")

	cancelled := jobs()[0]
	cancelled.State, cancelled.StartTime, cancelled.Error = imsv1.JobState_JOB_STATE_CANCELLED, nil, "cancelled by ci"
	lv = newLogView(m.env, cancelled)
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, closed: true})
	mustContain(t, screen(m), "no log lines: cancelled before it started")
	started := jobs()[0]
	started.State, started.StartTime = imsv1.JobState_JOB_STATE_CANCELLED, cancelled.CreateTime
	lv.setJob(started)
	mustNotContain(t, screen(m), "cancelled before it started")
}

// The install view shows each step's policy findings under its plan,
// denials first, a failed plan's too.
func TestInstallViewShowsPolicyFindings(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 60))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	feedInstallParts(m)
	d := "sha256:" + strings.Repeat("ab", 32)
	wf := &imsv1.Workflow{Id: "wf_4", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_UPDATE, State: imsv1.WorkflowState_WORKFLOW_STATE_FAILED,
		AppRevision: 5, CreateTime: jobs()[0].CreateTime,
		Steps: []*imsv1.WorkflowStep{
			{Name: "db", Component: "db", Operation: "apply", State: imsv1.StepState_STEP_STATE_PENDING, PlanJobId: "job_p1", PlanState: "planned", PlanDigest: d},
			{Name: "web", Component: "web", Operation: "apply", State: imsv1.StepState_STEP_STATE_FAILED, PlanJobId: "job_p2", PlanState: "failed", PlanError: "denied by policy"},
		}}
	m.Update(workflowsMsg{gen: v.wfGen, newest: wf, plans: map[string]stepPlan{
		"job_p1": newStepPlan([]*imsv1.PlannedChange{{Address: "aws_s3_bucket.logs", Action: "create"}},
			[]*imsv1.PolicyFinding{{Policy: "policies/tags.rego", Source: "vendor", Level: "warn", Message: "no cost tag"}}),
		"job_p2": newStepPlan(nil, []*imsv1.PolicyFinding{{Policy: "public.rego", Source: "customer", Level: "deny", Message: "public service"}}),
	}})
	s := screen(m)
	for _, want := range [][]string{
		{"plan planned sha256:abababababab", "1 to create"},
		{"policy warn [vendor] policies/tags.rego: no cost tag"},
		{"plan failed"},
		{"denied by policy"},
		{"policy deny [customer] public.rego: public service"},
	} {
		if !screenLine(s, want...) {
			t.Errorf("no line with %q:\n%s", want, s)
		}
	}
	if screenLine(s, "plan failed", "no changes") {
		t.Errorf("a failed plan shows a count of changes:\n%s", s)
	}
}

// The jobs table names each job's component, and component=C filters.
func TestJobsComponentColumn(t *testing.T) {
	m := newTestModel(t, Options{})
	feed(m, snapshot())
	press(m, ":", "jobs", "enter")
	m.Update(jobsMsg{gen: m.top().(*jobsView).gen, jobs: jobs()})
	mustContain(t, screen(m), "COMPONENT", "job_run", "job_bad")
	press(m, "/", "component=db", "enter")
	s := screen(m)
	mustContain(t, s, "job_bad")
	if strings.Contains(s, "job_run") {
		t.Fatalf("component=db shows job_run:\n%s", s)
	}
}

// grantActions opens acme's actions while the operator holds a live
// break-glass grant there.
func grantActions(m *Model) {
	press(m, "enter")
	m.Update(grantsMsg{gen: m.bg.pollGen, install: "ins_acme", me: "ops", grants: []*imsv1.BreakGlassGrant{liveGrant(time.Hour)}})
	press(m, "a")
	m.Update(actionsMsg{gen: m.top().(*actionsView).gen, revision: 3, actions: []*imsv1.Action{
		{Name: "migrate", Mode: "maintenance", Description: "run the migrations"},
		{Name: "rotate-keys", Mode: "break_glass", Description: "rotate the signing keys"},
	}})
}

// auditEvents opens :audit and gives it acme's chain: a job queued and
// its cancellation by ops, and a token created on the vendor's chain.
func auditEvents(m *Model) *auditView {
	press(m, ":", "audit", "enter")
	v := m.top().(*auditView)
	now := m.now.UnixNano()
	m.Update(auditMsg{gen: v.gen, events: []*imsv1.AuditEvent{
		{Chain: "ins_acme", Seq: 7, AtUnixNano: now - int64(3*time.Minute), Kind: "job.queued", Actor: "ci", Subject: "job:job_run",
			Data: `{"mode":"maintenance","operation":"apply","type":"action"}`, Prev: "9f2c", Hash: "41aa"},
		{Chain: "ins_acme", Seq: 8, AtUnixNano: now - int64(time.Minute), Kind: "job.cancel_requested", Actor: "ops", Subject: "job:job_run",
			Data: `{"mode":"maintenance","operation":"apply","reason":"cancelled by ops","type":"action"}`, Prev: "41aa", Hash: "c0de"},
		{Chain: "", Seq: 3, AtUnixNano: now - int64(2*time.Minute), Kind: "token.created", Actor: "admin", Subject: "token:ci"},
	}})
	return v
}

// In :audit, / filters the events (words, or kind=, actor=, install=,
// subject= whole) instead of moving the cursor, esc clears the filter, and
// enter opens the record under the cursor with every field and its data
// as indented JSON, scrolled with the list keys.
func TestAuditViewFiltersAndOpensARecord(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(120, 24))
	feed(m, snapshot())
	v := auditEvents(m)
	press(m, "/", "cancel")
	s := screen(m)
	if !screenLine(s, "acme", "job.cancel_requested", "ops") || strings.Contains(s, "job.queued") || strings.Contains(s, "token.created") {
		t.Fatalf("/cancel keeps only the cancellation:\n%s", s)
	}
	press(m, "enter")
	for _, c := range []struct{ filter, want string }{
		{"actor=admin", "token.created"}, {"install=vendor", "token.created"}, {"kind=job.queued", "job.queued"}, {"acme maintenance", ""},
	} {
		press(m, "esc", "/", c.filter, "enter")
		if c.want != "" && (len(v.shown) != 1 || v.shown[0].Kind != c.want) {
			t.Errorf("filter %q: %d shown, want only %s", c.filter, len(v.shown), c.want)
		}
	}
	if len(v.shown) != 2 {
		t.Errorf("filter %q: %d shown, want acme's 2", v.filter, len(v.shown))
	}
	press(m, "esc")
	if v.filter != "" || len(v.shown) != 3 {
		t.Fatalf("esc leaves filter %q, %d shown", v.filter, len(v.shown))
	}
	press(m, "/", "nothing-like-it", "enter")
	mustContain(t, screen(m), `none of the 3 events held matches the filter "nothing-like-it"`)
	press(m, "esc", "j", "enter") // the second newest: token.created
	d, ok := m.top().(*auditDetailView)
	if !ok || d.ev.Kind != "token.created" {
		t.Fatalf("enter opens the record under the cursor, top is %T", m.top())
	}
	press(m, "esc", "home", "enter")
	s = screen(m)
	mustContain(t, s, "audit › job.cancel_requested #8", "chain:    acme (ins_acme)", "seq:      8", "kind:     job.cancel_requested",
		"actor:    ops", "subject:  job:job_run", "prev:     41aa", "hash:     c0de", `"reason": "cancelled by ops",`, `"type": "action"`, "1m ago")

	m.Update(teaSize(120, 12)) // too short: it scrolls
	s = screen(m)
	mustContain(t, s, "more lines")
	if strings.Contains(s, `"type": "action"`) {
		t.Fatalf("a short window shows it all:\n%s", s)
	}
	press(m, "pgdown", "pgdown")
	mustContain(t, screen(m), `"type": "action"`)
}

// At 80×24 the install view is taller than the window: it scrolls (j/k a
// line while the job cursor is off screen, then the cursor; pgdown/pgup a
// window, the cursor following; home/end), its last line saying where it
// is, and nothing is "in a taller window"; a failed step shows why.
func TestInstallViewScrollsAndShowsWhyAStepFailed(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(80, 24))
	feed(m, snapshot())
	press(m, "enter")
	v := m.top().(*installView)
	m.Update(jobsMsg{gen: v.gen, jobs: jobs()})
	feedInstallParts(m)
	failed := &imsv1.Workflow{Id: "wf_3", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_FAILED,
		AppRevision: 3, CreateTime: timestamppb.New(clock.Add(-time.Minute)), Error: "step cache failed",
		Steps: []*imsv1.WorkflowStep{
			{Name: "db", Component: "db", Operation: "apply", State: imsv1.StepState_STEP_STATE_SUCCEEDED},
			{Name: "cache", Component: "cache", Operation: "apply", State: imsv1.StepState_STEP_STATE_FAILED,
				Error: "terraform apply: exit status 1: creating ElastiCache cluster: quota exceeded"},
		}}
	m.Update(workflowsMsg{gen: v.wfGen, newest: failed, deploy: failed})
	s := screen(m)
	mustNotContain(t, s, "taller window")
	mustContain(t, s, "lines 1-20 of", "the jobs from line")
	if strings.Contains(s, "job_bad") {
		t.Fatalf("the jobs are below the first screen at 80×24:\n%s", s)
	}
	for range 30 {
		if strings.Contains(screen(m), "ElastiCache") {
			break
		}
		press(m, "j")
	}
	s = screen(m)
	if !screenLine(s, "failed", "cache", "cache apply") || !strings.Contains(s, "terraform apply: exit status 1: creating ElastiCache cluster: quota") {
		t.Fatalf("the failed step without its reason:\n%s", s)
	}
	if v.pos != 0 {
		t.Fatalf("j moved the job cursor (%d) while its row was off screen", v.pos)
	}
	press(m, "pgdown", "pgdown", "pgdown")
	s = screen(m)
	mustContain(t, s, "job_run", "job_ok", "job_bad")
	if v.pos != 2 {
		t.Fatalf("pgdown at the end puts the cursor on the last job, pos %d", v.pos)
	}
	if cmd := press(m, "enter"); cmd == nil || m.top().(*logView).job.Id != "job_bad" {
		t.Fatal("enter opens the job under the cursor")
	}
	press(m, "esc", "k")
	if v.pos != 1 {
		t.Fatalf("k on a visible cursor moves it: pos %d", v.pos)
	}
	press(m, "home")
	mustContain(t, screen(m), "lines 1-20 of", "acme  ins_acme")
	press(m, "end")
	if v.pos != 2 || !strings.Contains(screen(m), "job_bad") {
		t.Fatalf("end: pos %d\n%s", v.pos, screen(m))
	}

	// In a tall window it all fits: no scrolling, j moves the cursor.
	m.Update(teaSize(80, 60))
	press(m, "home", "j")
	if v.pos != 1 || strings.Contains(screen(m), "lines 1-") {
		t.Fatalf("a window the page fits: pos %d\n%s", v.pos, screen(m))
	}
}

// Columns size to the window: at 200 columns a job's type and an audit
// event's kind show whole; at 80 they are cut as before.
func TestColumnsSizeToTheWindow(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(200, 24))
	feed(m, snapshot())
	press(m, ":", "jobs", "enter")
	js := append(jobs(), &imsv1.Job{Id: "job_tf", InstallId: "ins_acme", ComponentType: "terraform", Operation: "apply",
		State: imsv1.JobState_JOB_STATE_SUCCEEDED, CreateTime: jobs()[0].CreateTime, CreatedBy: "admin"})
	m.Update(jobsMsg{gen: m.top().(*jobsView).gen, jobs: js})
	if s := screen(m); !screenLine(s, "job_tf", "terraform apply ") {
		t.Fatalf("terraform apply cut at 200 columns:\n%s", s)
	}
	press(m, ":", "audit", "enter")
	m.Update(auditMsg{gen: m.top().(*auditView).gen, events: []*imsv1.AuditEvent{
		{Chain: "ins_acme", Seq: 1, AtUnixNano: m.now.UnixNano(), Kind: "agent.permissions_changed", Actor: "agent:agt_acme", Subject: "agent:agt_acme"},
	}})
	if s := screen(m); !strings.Contains(s, "agent.permissions_changed ") {
		t.Fatalf("agent.permissions_changed cut at 200 columns:\n%s", s)
	}
	m.Update(teaSize(80, 24))
	if s := screen(m); !strings.Contains(s, "agent.permissions_chang…") {
		t.Fatalf("at 80 columns the kind keeps its width:\n%s", s)
	}
}

// failedInstall opens acme with its jobs, parts and a failed provision.
func failedInstall(m *Model) {
	press(m, "enter")
	v := m.top().(*installView)
	m.Update(jobsMsg{gen: v.gen, jobs: append(jobs(), &imsv1.Job{Id: "job_tf", InstallId: "ins_acme", ComponentType: "terraform", Operation: "apply",
		State: imsv1.JobState_JOB_STATE_FAILED, CreateTime: jobs()[0].CreateTime, CreatedBy: "admin", Attempt: 1, MaxAttempts: 1})})
	feedInstallParts(m)
	failed := &imsv1.Workflow{Id: "wf_3", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_FAILED,
		AppRevision: 3, CreateTime: timestamppb.New(clock.Add(-time.Minute)), Error: "step cache failed",
		Steps: []*imsv1.WorkflowStep{
			{Name: "db", Component: "db", Operation: "apply", State: imsv1.StepState_STEP_STATE_SUCCEEDED},
			{Name: "cache", Component: "cache", Operation: "apply", State: imsv1.StepState_STEP_STATE_FAILED, JobId: "job_tf",
				Error: "terraform apply: exit status 1: creating ElastiCache cluster: quota exceeded"},
		}}
	m.Update(workflowsMsg{gen: v.wfGen, newest: failed, deploy: failed})
}

// d, y and J on a row open it as imsd returned it: described one field a
// line, as YAML and as JSON with protojson's camelCase keys; the list
// keys scroll it, d/y/J switch, esc goes back; c copies its id (OSC 52).
// Every list view offers them.
func TestDescribeAndYAMLOfTheRowUnderTheCursor(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(120, 60))
	feed(m, snapshot())
	press(m, "y")
	ov, ok := m.top().(*objectView)
	if !ok {
		t.Fatalf("y opens the row as YAML, top is %T", m.top())
	}
	s := screen(m)
	mustContain(t, s, "install acme (yaml)", "Install acme (ins_acme)", "install:", "  name: acme", "appRevision:")
	mustNotContain(t, s, "app_revision")
	press(m, "J")
	mustContain(t, screen(m), `"install": {`, `"name": "acme",`)
	press(m, "d")
	mustContain(t, screen(m), "install.name:", "acme")
	m.Update(teaSize(120, 8))
	mustContain(t, screen(m), "more lines")
	first := ov.off
	press(m, "pgdown")
	if ov.off == first {
		t.Fatal("pgdown does not scroll the object")
	}
	press(m, "esc")
	if _, ok := m.top().(*fleetView); !ok {
		t.Fatalf("esc goes back to the list, top is %T", m.top())
	}
	m.Update(teaSize(120, 60))

	cmd := press(m, "c")
	mustContain(t, screen(m), "copied install id ins_acme to the clipboard (OSC 52)")
	if cmd == nil {
		t.Fatal("c returns the clipboard command")
	}

	press(m, ":", "jobs", "enter")
	m.Update(jobsMsg{gen: m.top().(*jobsView).gen, jobs: jobs()})
	press(m, "d")
	mustContain(t, screen(m), "job "+jobs()[0].Id+" (describe)", "installId:")
	press(m, "esc")

	auditEvents(m)
	press(m, "y")
	mustContain(t, screen(m), "audit event acme #8 (yaml)", "kind: job.cancel_requested", "actor: ops")
	press(m, "esc")

	press(m, ":", "installs", "enter", "enter")
	m.Update(jobsMsg{gen: m.top().(*installView).gen, jobs: jobs()})
	press(m, "y")
	mustContain(t, screen(m), "job "+jobs()[0].Id+" (yaml)")
	press(m, "esc")
	press(m, "a")
	m.Update(actionsMsg{gen: m.top().(*actionsView).gen, revision: 3, actions: []*imsv1.Action{{Name: "migrate", Mode: "maintenance"}}})
	press(m, "y")
	mustContain(t, screen(m), "action migrate (yaml)", "mode: maintenance")
	press(m, "esc", "down", "y")
	mustContain(t, screen(m), "no row under the cursor")
}

func workflowsFixture() []*imsv1.Workflow {
	return []*imsv1.Workflow{
		{Id: "wf_prov1", InstallId: "ins_acme", InstallName: "acme", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_PROVISION, State: imsv1.WorkflowState_WORKFLOW_STATE_FAILED,
			CreatedBy: "ops", CreateTime: timestamppb.New(clock.Add(-10 * time.Minute)), Error: "step cache failed: terraform apply exited 1",
			StepCounts: map[string]int32{"succeeded": 1, "failed": 1}},
		{Id: "wf_act2", InstallId: "ins_globex", InstallName: "globex", Kind: imsv1.WorkflowKind_WORKFLOW_KIND_ACTION, State: imsv1.WorkflowState_WORKFLOW_STATE_SUCCEEDED,
			CreatedBy: "ci", CreateTime: timestamppb.New(clock.Add(-2 * time.Hour)), StepCounts: map[string]int32{"succeeded": 1}},
	}
}

// openTable feeds the table view on top its listing.
func openTable[T any](t *testing.T, m *Model, rows []T) *tableView[T] {
	t.Helper()
	v, ok := m.top().(*tableView[T])
	if !ok {
		t.Fatalf("top is %T, want a table of %T", m.top(), rows)
	}
	m.Update(tableMsg[T]{gen: v.gen, rows: rows})
	return v
}

// :workflows, :apps and :breakglass list what the CLI lists; enter on a
// workflow opens its steps, on an app its revisions; every row has d/y.
// A listing of an older generation is dropped.
func TestResourceCommands(t *testing.T) {
	m := newTestModel(t, Options{})
	m.Update(teaSize(160, 24))
	feed(m, snapshot())
	press(m, ":", "workflows", "enter")
	mustContain(t, screen(m), "loading workflows")
	v := openTable(t, m, workflowsFixture())
	m.Update(tableMsg[*imsv1.Workflow]{gen: v.gen - 1, rows: nil, err: errors.New("stale")})
	s := screen(m)
	if !screenLine(s, "wf_prov1", "acme", "provision", "failed", "1/2 done", "10m ago", "ops", "step cache failed") {
		t.Fatalf("workflow row:\n%s", s)
	}
	mustContain(t, s, "wf_act2", "globex")
	press(m, "/", "globex", "enter")
	mustNotContain(t, screen(m), "wf_prov1")
	press(m, "esc", "enter")
	steps := openTable(t, m, []*imsv1.WorkflowStep{
		{Name: "db", Component: "db", Operation: "apply", State: imsv1.StepState_STEP_STATE_SUCCEEDED, JobId: "job_db", Attempts: 1},
		{Name: "cache", Component: "cache", Operation: "apply", State: imsv1.StepState_STEP_STATE_FAILED, JobId: "job_tf", Attempts: 3, Error: "terraform apply exited 1"},
		{Name: "web", Component: "web", Operation: "apply", State: imsv1.StepState_STEP_STATE_PENDING, Needs: []string{"cache"}},
	})
	s = screen(m)
	mustContain(t, s, "workflows › workflow wf_prov1")
	if !screenLine(s, "cache", "apply", "failed", "3", "job_tf", "terraform apply exited 1") {
		t.Fatalf("step row:\n%s", s)
	}
	press(m, "down", "down", "enter")
	mustContain(t, screen(m), "step wf_prov1/web (describe)", "state:", "STEP_STATE_PENDING")
	press(m, "esc")
	if m.top() != view(steps) {
		t.Fatalf("esc goes back to the steps, top is %T", m.top())
	}
	// enter on a step with a job reads the job, then opens its log.
	press(m, "up", "enter")
	m.Update(jobMsg{gen: m.gen - 1, job: job("job_stale", "acme", imsv1.JobState_JOB_STATE_FAILED, 0)})
	if m.top() != view(steps) {
		t.Fatalf("a stale job read opened %T", m.top())
	}
	m.Update(jobMsg{gen: m.gen, job: job("job_tf", "acme", imsv1.JobState_JOB_STATE_FAILED, 0)})
	mustContain(t, screen(m), "workflow wf_prov1 › job_tf › logs")
	press(m, "esc", "enter")
	m.Update(jobMsg{gen: m.gen, err: connect.NewError(connect.CodeNotFound, errors.New("job job_tf not found"))})
	mustContain(t, screen(m), "job not read: job job_tf not found")
	press(m, "down", "y")
	mustContain(t, screen(m), "step wf_prov1/web (yaml)")
	press(m, "esc")

	press(m, ":", "apps", "enter")
	openTable(t, m, []*imsv1.App{{Id: "app_shop", Name: "shop", Description: "the demo shop"}, {Id: "app_billing", Name: "billing"}})
	mustContain(t, screen(m), "shop", "app_shop", "the demo shop", "billing")
	press(m, "enter")
	openTable(t, m, []*imsv1.AppRevision{{AppId: "app_shop", Number: 3, Version: "1.4.0", CreatedBy: "ci", Digest: "sha256:ab12", Components: []string{"db", "cache", "web"},
		Warnings: []string{"components/web.toml:5: config.size: is deprecated (set replicas instead)"}}})
	s = screen(m)
	mustContain(t, s, "apps › shop revisions", "WARNINGS")
	if !screenLine(s, "3", "1.4.0", "ci", "1", "sha256:ab12", "db, cache, web") {
		t.Fatalf("revision row:\n%s", s)
	}
	press(m, "y")
	mustContain(t, screen(m), "revision shop@3 (yaml)", "version: 1.4.0", "components:", "config.size: is deprecated")

	press(m, ":", "breakglass", "enter")
	g := liveGrant(time.Hour)
	// A grant that ended or was revoked shows when, never a countdown.
	late := liveGrant(-5 * time.Minute)
	late.Id = "bg_late"
	revoked := liveGrant(7 * time.Minute)
	revoked.Id, revoked.State, revoked.RevokeTime = "bg_rev", "revoked", timestamppb.New(clock.Add(-2*time.Minute))
	openTable(t, m, []*imsv1.BreakGlassGrant{g, late, revoked})
	s = screen(m)
	mustContain(t, s, "break-glass grants", g.Id, g.Role)
	if !screenLine(s, "bg_1", "in 1:00:00") || !screenLine(s, "bg_late", "ended 5m ago") || !screenLine(s, "bg_rev", "revoked 2m ago") {
		t.Fatalf("grant ENDS:\n%s", s)
	}
	press(m, "d")
	mustContain(t, screen(m), "grant "+g.Id+" (describe)", "role:")

	press(m, ":", "apps", "enter")
	v2 := m.top().(*tableView[*imsv1.App])
	m.Update(tableMsg[*imsv1.App]{gen: v2.gen, err: connect.NewError(connect.CodePermissionDenied, errors.New("viewer tokens cannot list apps"))})
	mustContain(t, screen(m), "apps not listed: viewer tokens cannot list apps")
}

// :ctx with no name lists the CLI config's contexts (the current one
// starred); enter switches to the one under the cursor, as :ctx NAME.
func TestCtxListsContextsAndEnterSwitches(t *testing.T) {
	m := newTestModel(t, Options{})
	press(m, ":", "ctx", "enter")
	mustContain(t, screen(m), ":ctx is not available: the console was started with --server")

	var dialled string
	m = newTestModel(t, Options{
		Contexts: func() ([]ContextInfo, error) {
			return []ContextInfo{{Name: "prod", Server: "https://ims.example.com", Current: true}, {Name: "staging", Server: "https://staging.example.com"}}, nil
		},
		Dial: func(_ contextT, name string) (*Conn, error) {
			dialled = name
			return &Conn{Context: name, Server: "https://staging.example.com", Client: nil}, nil
		},
	})
	m.Update(teaSize(100, 24))
	feed(m, snapshot())
	press(m, ":", "ctx")
	cmd := press(m, "enter")
	m.Update(runCmd(cmd, func(msg tea.Msg) bool { _, ok := msg.(tableMsg[ContextInfo]); return ok }))
	s := screen(m)
	if !screenLine(s, "*", "prod", "https://ims.example.com") || !screenLine(s, "staging", "https://staging.example.com") {
		t.Fatalf(":ctx lists the contexts, current starred:\n%s", s)
	}
	press(m, "y")
	mustContain(t, screen(m), "a context is not an object imsd holds")
	press(m, "down")
	cmd = press(m, "enter")
	mustContain(t, screen(m), "connecting to context staging")
	msg := runCmd(cmd, func(msg tea.Msg) bool { _, ok := msg.(ctxMsg); return ok })
	if dialled != "staging" {
		t.Fatalf("enter dials %q, want staging", dialled)
	}
	m.opts.NoWatch = true
	m.Update(msg)
	mustContain(t, screen(m), "switched to context staging")
}

// runCmd runs cmd (and the commands a batch holds) until one returns a
// message want accepts; it runs no ticks (they would wait).
func runCmd(cmd tea.Cmd, want func(tea.Msg) bool) tea.Msg {
	if cmd == nil {
		return nil
	}
	msg := cmd()
	if want(msg) {
		return msg
	}
	if b, ok := msg.(tea.BatchMsg); ok {
		for _, c := range b {
			if m := runCmd(c, want); m != nil {
				return m
			}
		}
	}
	return nil
}

// ctrl+s in a log writes the lines held to JOB-ATTEMPT.log under
// $BYOC_LOG_DIR, whole (a temporary file renamed), and the status line
// names the path; a directory it cannot write says so. c copies the job's
// id with OSC 52 (bubbletea's SetClipboard) and says so.
func TestSaveLogAndCopyID(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BYOC_LOG_DIR", dir)
	m := newTestModel(t, Options{})
	m.Update(teaSize(200, 24))
	feed(m, snapshot())
	j := jobs()[0]
	j.Attempt = 2
	lv := newLogView(m.env, j)
	m.push(lv)
	m.Update(logMsg{gen: lv.gen, chunks: []logChunk{{lines: logLines(1, 5, func(i int) string { return fmt.Sprintf("step %d", i) })}}})
	cmd := press(m, "ctrl+s")
	if cmd == nil {
		t.Fatal("ctrl+s returns the command that writes the file")
	}
	msg := runCmd(cmd, func(msg tea.Msg) bool { _, ok := msg.(savedLogMsg); return ok })
	m.Update(msg)
	path := filepath.Join(dir, j.Id+"-2.log")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "step 1\nstep 2\nstep 3\nstep 4\nstep 5\n"; string(b) != want {
		t.Fatalf("%s holds %q, want %q", path, b, want)
	}
	mustContain(t, screen(m), "saved 5 lines to "+path)
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the save left %d files in %s, want just the log", len(ents), dir)
	}

	t.Setenv("BYOC_LOG_DIR", filepath.Join(dir, "missing"))
	m.Update(runCmd(press(m, "ctrl+s"), func(msg tea.Msg) bool { _, ok := msg.(savedLogMsg); return ok }))
	mustContain(t, screen(m), "log not saved:", "missing")

	cmd = press(m, "c")
	mustContain(t, screen(m), "copied job id "+j.Id+" to the clipboard (OSC 52)")
	if got := runCmd(cmd, func(tea.Msg) bool { return true }); fmt.Sprintf("%v", got) != j.Id {
		t.Fatalf("c sends %v to the clipboard, want %s", got, j.Id)
	}
}

// vendorInstall answers GetInstall for the vendor's build agent's
// install, which the fleet watch leaves out.
type vendorInstall struct {
	imsv1connect.UnimplementedOperatorServiceHandler
}

func (vendorInstall) GetInstall(_ context.Context, req *connect.Request[imsv1.GetInstallRequest]) (*connect.Response[imsv1.GetInstallResponse], error) {
	if req.Msg.GetIdOrName() != "vendor" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such install"))
	}
	return connect.NewResponse(&imsv1.GetInstallResponse{Install: &imsv1.Install{Id: "vendor", Name: "_vendor", AppId: "vendor"}}), nil
}

// A build job runs on the vendor's build agent's install, which is not in
// the fleet: the jobs table and the job's log view name it _vendor, as
// byoc job list and job get do, not by its id "vendor".
func TestJobsNameTheVendorInstall(t *testing.T) {
	_, h := imsv1connect.NewOperatorServiceHandler(vendorInstall{})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	m := newTestModel(t, Options{Conn: &Conn{Context: "prod", Server: srv.URL,
		Client: imsv1connect.NewOperatorServiceClient(srv.Client(), srv.URL)}})
	feed(m, snapshot())
	press(m, ":", "jobs", "enter")
	build := &imsv1.Job{Id: "job_build", InstallId: "vendor", ComponentType: "build", Operation: "apply",
		State: imsv1.JobState_JOB_STATE_QUEUED, Attempt: 1, MaxAttempts: 3, CreateTime: timestamppb.New(clock.Add(-time.Minute)), CreatedBy: "admin"}
	_, cmd := m.Update(jobsMsg{gen: m.top().(*jobsView).gen, jobs: append(jobs(), build)})
	settle(m, cmd)
	s := screen(m)
	if !screenLine(s, "job_build", "_vendor", "build apply") {
		t.Fatalf("the build job's row does not name _vendor:\n%s", s)
	}
	mustContain(t, s, "job_run")
}

// settle runs cmd (and the commands a batch holds) and gives m each
// message they return; it runs no ticks (they would wait).
func settle(m *Model, cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	msg := cmd()
	if b, ok := msg.(tea.BatchMsg); ok {
		for _, c := range b {
			settle(m, c)
		}
		return
	}
	if msg != nil {
		_, next := m.Update(msg)
		settle(m, next)
	}
}
