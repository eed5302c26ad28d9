package console

import (
	"context"
	"fmt"
	"os"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/byoc-dev/byoc/internal/plural"
	"github.com/byoc-dev/byoc/plugins/sdk/loglevel"
	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

const (
	logTail  = 2000 // lines fetched when a log opens
	logPage  = 1000 // lines fetched per page back
	tsFormat = "15:04:05.000 "
)

// logView shows one job's log: the last lines, then new ones as they come
// (follow), older ones fetched from imsd when scrolling back past what is
// in memory. Memory is bounded by a ring buffer.
type logView struct {
	*env
	w, h   int
	job    *imsv1.Job
	jobErr string // job.Error, cleaned
	ctx    context.Context
	cancel context.CancelFunc // ends everything the view started
	// streamCancel ends just the follow stream (after a page back dropped
	// the end of the log, or before a new stream starts).
	streamCancel context.CancelFunc
	gen          int // the follow stream's generation
	ch           chan logChunk
	r            *ring

	jobGen   int
	saveGen  int
	olderGen int
	newerGen int
	fetching bool // a page back is in flight
	forward  bool // a page forward is in flight
	noOlder  bool // imsd has nothing before the first line held
	tailGap  bool // the newest lines were dropped to make room for older ones
	dropped  int  // lines dropped from the front since the log opened
	streamOn bool
	err      error

	follow, wrap, stamps bool
	// level, if set, hides lines below it (loglevel; a line without a
	// level counts as info).
	level    string
	top, sub int // first shown row: line index in r and row within that line
	query    string
	match    int // line index of the current match, or -1
}

func newLogView(e *env, j *imsv1.Job) *logView {
	v := &logView{env: e, r: newRing(e.opts.LogLines, e.opts.LogBytes), follow: true, match: -1}
	v.setJob(j)
	return v
}

// setJob keeps the job's latest state, and its error cleaned as log lines
// are: an agent reports it, and it may hold what the job printed.
func (v *logView) setJob(j *imsv1.Job) {
	v.job, v.jobErr = j, cleanLine(j.Error)
}

func (v *logView) Title() string    { return v.job.Id + " › logs" }
func (v *logView) SetSize(w, h int) { v.w, v.h = w, h }

func (v *logView) Init() tea.Cmd {
	v.ctx, v.cancel = context.WithCancel(v.env.ctx)
	return v.startStream()
}

func (v *logView) Close() { v.cancel() }

// startStream (re)starts following from the job's last lines, dropping
// what the buffer held.
func (v *logView) startStream() tea.Cmd {
	v.stopStream()
	v.r.Reset()
	v.top, v.sub, v.match, v.noOlder, v.tailGap, v.follow = 0, 0, -1, false, false, true
	v.olderGen, v.newerGen = 0, 0
	v.fetching, v.forward = false, false
	return v.follow_(min(logTail, v.opts.LogLines), 0, 0)
}

// follow_ starts the follow stream: the last tail lines, or with tail 0
// the lines after (attempt, seq), then new ones until the job ends.
func (v *logView) follow_(tail int, attempt int32, seq int64) tea.Cmd {
	v.gen = v.nextGen()
	if v.conn == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(v.ctx)
	v.ch = make(chan logChunk, 256)
	v.streamOn, v.streamCancel = true, cancel
	go followLogs(ctx, v.conn.Client, v.job.Id, tail, attempt, seq, v.ch)
	return v.wait()
}

// jumpToStart drops what is held and reads the log's first page; the end
// is then out of memory until paging forward reaches it (or G).
func (v *logView) jumpToStart() tea.Cmd {
	v.stopStream()
	v.r.Reset()
	v.top, v.sub, v.match, v.follow, v.tailGap = 0, 0, -1, false, true
	v.fetching, v.forward, v.olderGen = false, false, 0 // answers to earlier pages are stale
	return v.fetchNewer()
}

// fetchNewer reads the page after the last line held.
func (v *logView) fetchNewer() tea.Cmd {
	// One page at a time: a page back may drop the end this would follow.
	if v.forward || v.fetching || !v.tailGap || v.conn == nil {
		return nil
	}
	var attempt int32
	var seq int64
	if n := v.r.Len(); n > 0 {
		attempt, seq = v.r.At(n-1).attempt, v.r.At(n-1).seq
	}
	v.forward = true
	v.newerGen = v.nextGen()
	return newerLogs(v.ctx, v.conn.Client, v.newerGen, v.job.Id, attempt, seq, v.pageSize())
}

func (v *logView) stopStream() {
	if v.streamCancel != nil {
		v.streamCancel()
		v.streamCancel = nil
	}
	v.gen = -1 // whatever is still on its way is stale
	v.streamOn = false
}

func (v *logView) wait() tea.Cmd {
	gen, ch := v.gen, v.ch
	return nextBatch(ch, 64, func(c []logChunk, closed bool) tea.Msg { return logMsg{gen: gen, chunks: c, closed: closed} })
}

func (v *logView) Hints() []Action {
	return []Action{ActFollow, ActWrap, ActTimestamps, ActNextMatch, ActSaveLog, ActCancelJob}
}

// jobChanged reads the job again when the fleet says its install changed
// (its state is in the view's status line), until it has ended.
func (v *logView) jobChanged(resps []*imsv1.WatchInstallsResponse) tea.Cmd {
	if terminal(v.job.State) {
		return nil
	}
	for _, r := range resps {
		for _, s := range r.Installs {
			if s.Install.Id == v.job.InstallId {
				v.jobGen = v.nextGen()
				return getJob(v.ctx, v.conn.Client, v.jobGen, v.job.Id)
			}
		}
	}
	return nil
}

func (v *logView) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		return v.key(msg)
	case fleetChangedMsg:
		return v.jobChanged(msg.resps)
	case savedLogMsg:
		if msg.gen != v.saveGen {
			return nil
		}
		switch {
		case msg.err != nil:
			v.nav.setStatus(true, "log not saved: %v", msg.err)
		case v.hasOlder():
			v.nav.setStatus(false, "saved %s to %s (earlier lines are not held: byoc job logs %s has them all)", plural.Count(msg.n, "line"), msg.path, v.job.Id)
		default:
			v.nav.setStatus(false, "saved %s to %s", plural.Count(msg.n, "line"), msg.path)
		}
		return nil
	case logMsg:
		if msg.gen != v.gen {
			return nil
		}
		for _, c := range msg.chunks {
			for _, l := range c.lines {
				v.appendLine(toLogLine(l))
			}
			if c.job != nil {
				v.setJob(c.job)
			}
			if c.err != nil {
				v.err = c.err
			}
		}
		if msg.closed {
			v.streamOn = false
			return nil
		}
		return v.wait()
	case olderLogsMsg:
		if msg.gen != v.olderGen {
			return nil
		}
		v.fetching = false
		if msg.err != nil {
			v.err = msg.err
			return nil
		}
		if len(msg.lines) == 0 {
			v.noOlder = true
			return nil
		}
		for i := len(msg.lines) - 1; i >= 0; i-- {
			if v.r.Prepend(toLogLine(msg.lines[i])) > 0 {
				v.tailGap = true
			}
		}
		if v.tailGap && v.streamOn {
			v.stopStream() // the end is no longer in memory: stop following
			v.follow = false
		}
		v.top += len(msg.lines)
		if v.match >= 0 {
			v.match += len(msg.lines)
		}
		v.top = min(v.top, v.r.Len()-1)
		return nil
	case newerLogsMsg:
		if msg.gen != v.newerGen {
			return nil
		}
		v.forward = false
		if msg.err != nil {
			v.err = msg.err
			return nil
		}
		for _, l := range msg.lines {
			v.appendLine(toLogLine(l))
		}
		if len(msg.lines) < v.pageSize() {
			// The end of the log is in memory again: follow on from it.
			v.tailGap = false
			var attempt int32
			var seq int64
			if n := v.r.Len(); n > 0 {
				attempt, seq = v.r.At(n-1).attempt, v.r.At(n-1).seq
			}
			return v.follow_(0, attempt, seq)
		}
		return nil
	case jobMsg:
		if msg.gen == v.jobGen && msg.err == nil {
			v.setJob(msg.job)
		}
	}
	return nil
}

// appendLine adds a line at the end; when the oldest lines leave memory the
// view stays on the lines it shows.
func (v *logView) appendLine(l logLine) {
	if d := v.r.Append(l); d > 0 {
		v.dropped += d
		v.top = max(0, v.top-d)
		v.noOlder = false
		if v.match >= 0 {
			v.match = max(-1, v.match-d)
		}
	}
}

func (v *logView) key(msg tea.KeyPressMsg) tea.Cmd {
	w, h := v.w, v.textHeight()
	switch {
	case v.km.Is(msg, ActUp):
		return v.scroll(-1)
	case v.km.Is(msg, ActDown):
		return v.scroll(1)
	case v.km.Is(msg, ActPageUp):
		return v.scroll(-h)
	case v.km.Is(msg, ActPageDown):
		return v.scroll(h)
	case v.km.Is(msg, ActTop):
		if v.hasOlder() {
			return v.jumpToStart()
		}
		v.follow, v.top, v.sub = false, 0, 0
	case v.km.Is(msg, ActBottom):
		if v.tailGap {
			return v.startStream()
		}
		v.follow = true
	case v.km.Is(msg, ActFollow):
		if !v.follow && v.tailGap {
			return v.startStream()
		}
		if v.follow {
			v.top, v.sub = v.bottom(w, h)
		}
		v.follow = !v.follow
	case v.km.Is(msg, ActWrap):
		v.wrap = !v.wrap
		v.sub = 0
	case v.km.Is(msg, ActTimestamps):
		v.stamps = !v.stamps
		v.sub = 0
	case v.km.Is(msg, ActLogLevel):
		next := map[string]string{"": "debug", "debug": "info", "info": "warn", "warn": "error", "error": ""}
		v.level, v.sub = next[v.level], 0
	case v.km.Is(msg, ActNextMatch):
		v.findMatch(1)
	case v.km.Is(msg, ActPrevMatch):
		v.findMatch(-1)
	case v.km.Is(msg, ActCancelJob):
		return v.nav.confirmCancel(v.job)
	case v.km.Is(msg, ActSaveLog):
		return v.save()
	}
	return nil
}

// savedLogMsg answers a save of the log (ctrl+s).
type savedLogMsg struct {
	gen  int
	path string
	n    int
	err  error
}

// save writes the lines held to JOB-ATTEMPT.log in $BYOC_LOG_DIR (or the
// working directory) in a command: Update only copies the lines' texts
// (strings, so not their bytes).
func (v *logView) save() tea.Cmd {
	texts := make([]string, v.r.Len())
	for i := range texts {
		texts[i] = v.r.At(i).text
	}
	v.saveGen = v.nextGen()
	gen, name := v.saveGen, fmt.Sprintf("%s-%d.log", v.job.Id, max(1, v.job.Attempt))
	v.nav.setStatus(false, "saving %s…", plural.Count(len(texts), "line"))
	return func() tea.Msg {
		path, err := saveLog(os.Getenv("BYOC_LOG_DIR"), name, texts)
		return savedLogMsg{gen: gen, path: path, n: len(texts), err: err}
	}
}

// pageSize is how many lines one page back or forward reads: at most half
// the buffer, so a page never pushes out everything that was on screen.
func (v *logView) pageSize() int { return max(1, min(logPage, v.opts.LogLines/2)) }

// textHeight is the rows left for log text under the view's status line.
func (v *logView) textHeight() int { return max(1, v.h-1) }

func (v *logView) prefixWidth() int {
	if v.stamps {
		return len(tsFormat)
	}
	return 0
}

// rows is how many screen rows line i takes at width w.
func (v *logView) rows(i, w int) int {
	l := v.r.At(i)
	if v.level != "" && !loglevel.AtLeast(l.text, v.level) {
		return 0 // below the level shown
	}
	if !v.wrap {
		return 1
	}
	tw := max(1, w-v.prefixWidth())
	if !l.ascii {
		l.row(0, tw) // wide characters: count the rows the cuts make
		return max(1, len(l.cuts))
	}
	return max(1, (l.width+tw-1)/tw)
}

// bottom is the first shown row when the last line is on the last row.
func (v *logView) bottom(w, h int) (int, int) {
	n := v.r.Len()
	if n == 0 {
		return 0, 0
	}
	left := h
	for i := n - 1; i >= 0; i-- {
		r := v.rows(i, w)
		if r >= left {
			return i, r - left
		}
		left -= r
	}
	return 0, 0
}

// scroll moves by d rows; moving up pauses following, and reaching the
// first line held fetches the page before it.
func (v *logView) scroll(d int) tea.Cmd {
	w, h := v.w, v.textHeight()
	if v.follow {
		v.top, v.sub = v.bottom(w, h)
	}
	if d < 0 {
		v.follow = false
	}
	for ; d < 0; d++ {
		if v.sub > 0 {
			v.sub--
		} else if v.top > 0 {
			v.top--
			v.sub = v.rows(v.top, w) - 1
		} else {
			break
		}
	}
	bt, bs := v.bottom(w, h)
	for ; d > 0; d-- {
		if v.top > bt || (v.top == bt && v.sub >= bs) {
			break
		}
		if v.sub+1 < v.rows(v.top, w) {
			v.sub++
		} else {
			v.top++
			v.sub = 0
		}
	}
	var cmds []tea.Cmd
	if v.top < h {
		cmds = append(cmds, v.fetchOlder()) // near the first line held: read back
	}
	if v.tailGap && v.r.Len()-v.top <= 2*h {
		cmds = append(cmds, v.fetchNewer()) // near the last line held: read on
	}
	return tea.Batch(cmds...)
}

// hasOlder reports whether imsd may hold lines before the first one held.
func (v *logView) hasOlder() bool {
	if v.noOlder || v.r.Len() == 0 {
		return false
	}
	f := v.r.At(0)
	return !(f.attempt <= 1 && f.seq <= 1)
}

func (v *logView) fetchOlder() tea.Cmd {
	if v.fetching || v.forward || !v.hasOlder() || v.conn == nil {
		return nil
	}
	f := v.r.At(0)
	v.fetching = true
	v.olderGen = v.nextGen()
	return olderLogs(v.ctx, v.conn.Client, v.olderGen, v.job.Id, f.attempt, f.seq, v.pageSize())
}

// Search finds q from the first shown line on.
func (v *logView) Search(q string) {
	v.query = q
	v.match = v.top - 1
	if q == "" {
		v.match = -1
		return
	}
	v.findMatch(1)
}

// findMatch moves to the next (dir 1) or previous (dir -1) line holding the
// query, wrapping around the buffer.
func (v *logView) findMatch(dir int) {
	n := v.r.Len()
	if v.query == "" || n == 0 {
		return
	}
	q := strings.ToLower(v.query)
	start := v.match
	if start < 0 {
		start = v.top - dir
	}
	for k := 1; k <= n; k++ {
		i := ((start+dir*k)%n + n) % n
		if strings.Contains(strings.ToLower(v.r.At(i).text), q) {
			v.match = i
			v.follow = false
			v.top, v.sub = i, 0
			v.nav.setStatus(false, "/%s: match %d of %d", v.query, v.countBefore(i, q)+1, v.countBefore(n, q))
			return
		}
	}
	v.nav.setStatus(true, "/%s: no match in the %s held", v.query, plural.Count(n, "line"))
}

func (v *logView) countBefore(end int, q string) int {
	c := 0
	for i := 0; i < end; i++ {
		if strings.Contains(strings.ToLower(v.r.At(i).text), q) {
			c++
		}
	}
	return c
}

// maxPolicyLines is how many lines of policy findings the job view shows
// above the log.
const maxPolicyLines = 4

func (v *logView) View() string { return lines(v.render(v.w, v.h)) }

func (v *logView) render(w, h int) []string {
	j := v.job
	state := stateName(j.State)
	if terminal(j.State) {
		state += fmt.Sprintf(" (exit %d)", j.ExitCode)
	}
	mode := "paused"
	if v.follow {
		mode = "following"
	}
	flags := []string{mode}
	if v.wrap {
		flags = append(flags, "wrap")
	}
	if v.stamps {
		flags = append(flags, "time")
	}
	if v.level != "" {
		flags = append(flags, "level ≥ "+v.level)
	}
	info := fmt.Sprintf("%s · %s %s · %s · try %s · %s · %s",
		v.installName(j.InstallId), j.ComponentType, j.Operation, state, tryText(j), plural.Count(v.r.Len(), "line"), strings.Join(flags, " "))
	if v.query != "" {
		info += " · /" + v.query
	}
	out := []string{v.st.muted.Render(info)}
	th := h - 1
	if v.err != nil {
		out = append(out, v.st.bad.Render("log stream: "+errText(v.err)))
		th--
	}
	if v.jobErr != "" && terminal(j.State) {
		// A refused job's error is the whole story: "refused: maintenance
		// is turned off in the customer's account".
		prefix := "error: "
		if j.State == imsv1.JobState_JOB_STATE_REFUSED {
			prefix = ""
		}
		out = append(out, v.st.bad.Render(prefix+v.jobErr))
		th--
	}
	// The job's policy findings (a plan's, or an apply's that a policy
	// denied), denials first; at most maxPolicyLines, so the log keeps
	// its room.
	if fs := policyLines(j.PolicyFindings); len(fs) > 0 {
		for i, f := range fs {
			if i == maxPolicyLines-1 && len(fs) > maxPolicyLines {
				out = append(out, v.st.muted.Render(fmt.Sprintf("policy: … %d more (byoc job get %s)", len(fs)-i, j.Id)))
				th--
				break
			}
			style := v.st.warn
			if f.deny {
				style = v.st.bad
			}
			out = append(out, style.Render("policy "+f.text))
			th--
		}
	}
	n := v.r.Len()
	if n == 0 {
		if v.forward {
			return append(out, v.st.muted.Render("reading the log's first lines from imsd…"))
		}
		if v.streamOn {
			return append(out, v.st.muted.Render("no log lines yet; following…"))
		}
		if j.State == imsv1.JobState_JOB_STATE_CANCELLED && j.StartTime == nil {
			// By design: no agent ever started it.
			return append(out, v.st.muted.Render("no log lines: cancelled before it started"))
		}
		return append(out, v.st.muted.Render("no log lines"))
	}
	top, sub := v.top, v.sub
	if v.follow {
		top, sub = v.bottom(w, th)
	}
	top = max(0, min(top, n-1))
	if top == 0 && sub == 0 && (v.hasOlder() || v.dropped > 0) {
		switch {
		case v.fetching:
			out = append(out, v.st.warn.Render("··· fetching older lines from imsd…"))
		case v.hasOlder():
			out = append(out, v.st.warn.Render(fmt.Sprintf("··· earlier lines are not in memory (%d dropped); scrolling up fetches them", v.dropped)))
		}
	}
	pw := v.prefixWidth()
	tw := max(1, w-pw)
	q := strings.ToLower(v.query)
	for i := top; i < n && len(out) < h; i++ {
		l := v.r.At(i)
		rows := v.rows(i, w)
		for k := sub; k < rows && len(out) < h; k++ {
			var text string
			if v.wrap {
				text = l.row(k, tw)
			} else {
				text = l.columns(0, tw)
			}
			text = v.highlight(text, q, i == v.match)
			switch {
			case l.system:
				text = v.st.muted.Render(text)
			case l.stderr:
				text = v.st.warn.Render(text)
			}
			prefix := ""
			if v.stamps {
				prefix = strings.Repeat(" ", pw)
				if k == 0 && !l.time.IsZero() {
					prefix = v.st.muted.Render(l.time.Local().Format(tsFormat))
				}
			}
			out = append(out, prefix+text)
		}
		sub = 0
	}
	if v.tailGap && len(out) < h {
		msg := "··· newer lines are not in memory; scrolling down reads on, G jumps to the end"
		if v.forward {
			msg = "··· reading on from imsd…"
		}
		out = append(out, v.st.warn.Render(msg))
	}
	return out
}

// highlight marks the query's occurrences in a shown row.
func (v *logView) highlight(text, q string, current bool) string {
	if q == "" {
		return text
	}
	lower := strings.ToLower(text)
	if len(lower) != len(text) || !strings.Contains(lower, q) {
		if current {
			return v.st.match.Render(text)
		}
		return text
	}
	var b strings.Builder
	for {
		i := strings.Index(lower, q)
		if i < 0 {
			b.WriteString(text)
			break
		}
		b.WriteString(text[:i])
		b.WriteString(v.st.match.Render(text[i : i+len(q)]))
		text, lower = text[i+len(q):], lower[i+len(q):]
	}
	return b.String()
}
