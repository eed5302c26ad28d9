package console

import (
	"time"

	"github.com/mattn/go-runewidth"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
	"github.com/byoc-dev/byoc/tui/termtext"
)

// logLine is one stored log line, cleaned for the terminal.
type logLine struct {
	attempt int32
	seq     int64
	time    time.Time
	stderr  bool
	system  bool
	text    string
	width   int  // display width of text
	ascii   bool // text is printable ASCII: columns are bytes
	// cuts caches, for non-ASCII text wrapped at cutW columns, the byte
	// offset where each row starts, so that showing row k of a long line
	// does not walk the line from its start every frame.
	cutW int
	cuts []int
}

// row returns row k of l wrapped at w columns.
func (l *logLine) row(k, w int) string {
	if l.ascii {
		return l.columns(k*w, (k+1)*w)
	}
	if l.cutW != w {
		l.cutW, l.cuts = w, l.cuts[:0]
		col := 0
		l.cuts = append(l.cuts, 0)
		for i, r := range l.text {
			rw := runewidth.RuneWidth(r)
			if col+rw > w {
				l.cuts = append(l.cuts, i)
				col = 0
			}
			col += rw
		}
	}
	if k >= len(l.cuts) {
		return ""
	}
	end := len(l.text)
	if k+1 < len(l.cuts) {
		end = l.cuts[k+1]
	}
	return l.text[l.cuts[k]:end]
}

// ring is a bounded buffer of log lines: at most maxLines lines and about
// maxBytes bytes of text. Appending past the bound drops the oldest lines;
// prepending an older page drops the newest (the view then knows it no
// longer holds the end of the log).
type ring struct {
	buf      []logLine
	start, n int
	bytes    int
	maxLines int
	maxBytes int
}

func newRing(maxLines, maxBytes int) *ring {
	return &ring{buf: make([]logLine, maxLines), maxLines: maxLines, maxBytes: maxBytes}
}

func (r *ring) Len() int { return r.n }

func (r *ring) At(i int) *logLine { return &r.buf[(r.start+i)%r.maxLines] }

// Append adds lines at the end and returns how many old lines it dropped.
func (r *ring) Append(l logLine) (dropped int) {
	if r.n == r.maxLines {
		r.dropFront()
		dropped++
	}
	r.buf[(r.start+r.n)%r.maxLines] = l
	r.n++
	r.bytes += len(l.text)
	for r.bytes > r.maxBytes && r.n > 1 {
		r.dropFront()
		dropped++
	}
	return dropped
}

// Prepend adds a line at the start and returns how many of the newest lines
// it dropped to stay within the bounds.
func (r *ring) Prepend(l logLine) (dropped int) {
	if r.n == r.maxLines {
		r.dropBack()
		dropped++
	}
	r.start = (r.start - 1 + r.maxLines) % r.maxLines
	r.buf[r.start] = l
	r.n++
	r.bytes += len(l.text)
	for r.bytes > r.maxBytes && r.n > 1 {
		r.dropBack()
		dropped++
	}
	return dropped
}

func (r *ring) dropFront() {
	r.bytes -= len(r.buf[r.start].text)
	r.buf[r.start] = logLine{}
	r.start = (r.start + 1) % r.maxLines
	r.n--
}

func (r *ring) dropBack() {
	i := (r.start + r.n - 1) % r.maxLines
	r.bytes -= len(r.buf[i].text)
	r.buf[i] = logLine{}
	r.n--
}

// Reset empties the buffer.
func (r *ring) Reset() {
	clear(r.buf)
	r.start, r.n, r.bytes = 0, 0, 0
}

func toLogLine(l *imsv1.LogLine) logLine {
	out := logLine{attempt: l.Attempt, seq: l.Seq, text: cleanLine(l.Text),
		stderr: l.Stream == imsv1.LogStream_LOG_STREAM_STDERR, system: l.Stream == imsv1.LogStream_LOG_STREAM_SYSTEM}
	if l.Time != nil {
		out.time = l.Time.AsTime()
	}
	out.width, out.ascii = textWidth(out.text)
	return out
}

// cleanLine makes a log line safe to print: escape sequences and other
// control characters a job wrote are shown, not obeyed, and tabs become
// spaces so that widths stay exact.
func cleanLine(s string) string { return termtext.Clean(s, "    ") }

// textWidth returns the display width of s and whether s is plain ASCII.
func textWidth(s string) (int, bool) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return len(s), true
	}
	w := 0
	for _, r := range s {
		w += runewidth.RuneWidth(r)
	}
	return w, false
}

// columns returns the part of l's text from display column a up to b. It
// costs O(b) for non-ASCII text and O(1) for ASCII, so a 100,000-character
// line costs only what is shown of it.
func (l *logLine) columns(a, b int) string {
	if a >= l.width {
		return ""
	}
	b = min(b, l.width)
	if l.ascii {
		return l.text[a:b]
	}
	col, start := 0, -1
	for i, r := range l.text {
		if col >= b {
			if start < 0 {
				return ""
			}
			return l.text[start:i]
		}
		if col >= a && start < 0 {
			start = i
		}
		col += runewidth.RuneWidth(r)
	}
	if start < 0 {
		return ""
	}
	return l.text[start:]
}
