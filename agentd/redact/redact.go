// Package redact removes secret values from what the agent sends to imsd:
// log lines, errors and outputs. It is the last step before anything of a
// job leaves the agent, so it does not trust plugins to have redacted
// anything themselves.
//
// A plugin may send one secret in pieces, in consecutive log events of one
// stream (a chunk of output per event, or a long line split in two).
// [Stream] therefore holds back an event that ends with the beginning of a
// secret until the next event on that stream shows whether the secret
// continues, or until it is flushed.
package redact

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Mask replaces every secret value.
const Mask = "***"

// MinLength is the shortest value redacted; a shorter one would mask
// ordinary text everywhere (and is no secret worth the name).
const MinLength = 4

// Redactor knows the secret values of one job.
type Redactor struct {
	secrets []string // longest first, so the longest match wins
	maxLen  int
}

// New returns a Redactor for values. A multi-line value is also redacted
// line by line, since a log line can only ever hold one of its lines.
// Values shorter than MinLength are skipped.
func New(values ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	add := func(v string) {
		if len(v) >= MinLength && !seen[v] {
			seen[v] = true
			r.secrets = append(r.secrets, v)
			r.maxLen = max(r.maxLen, len(v))
		}
	}
	for _, v := range values {
		add(v)
		if strings.ContainsAny(v, "\r\n") {
			for _, line := range strings.FieldsFunc(v, func(c rune) bool { return c == '\n' || c == '\r' }) {
				add(strings.TrimSpace(line))
			}
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// Empty reports whether there is nothing to redact.
func (r *Redactor) Empty() bool { return r == nil || len(r.secrets) == 0 }

// String redacts every secret in s.
func (r *Redactor) String(s string) string {
	if r.Empty() {
		return s
	}
	covered := r.cover(s)
	return maskRange(s, covered, 0, len(s))
}

// Map returns m with every value redacted.
func (r *Redactor) Map(m map[string]string) map[string]string {
	if r.Empty() || m == nil {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[r.String(k)] = r.String(v)
	}
	return out
}

// cover marks the bytes of s that belong to a secret.
func (r *Redactor) cover(s string) []bool {
	covered := make([]bool, len(s))
	for _, sec := range r.secrets {
		for i := 0; ; {
			j := strings.Index(s[i:], sec)
			if j < 0 {
				break
			}
			for k := i + j; k < i+j+len(sec); k++ {
				covered[k] = true
			}
			i += j + 1
		}
	}
	return covered
}

// maskRange returns s[from:to] with each run of covered bytes replaced by
// one Mask.
func maskRange(s string, covered []bool, from, to int) string {
	var b strings.Builder
	for i := from; i < to; {
		if !covered[i] {
			j := i
			for j < to && !covered[j] {
				j++
			}
			b.WriteString(s[i:j])
			i = j
			continue
		}
		for i < to && covered[i] {
			i++
		}
		b.WriteString(Mask)
	}
	return b.String()
}

// heldFrom returns where the tail of s that could be the start of a
// secret begins, or len(s) if no tail could.
func (r *Redactor) heldFrom(s string) int {
	for i := max(0, len(s)-r.maxLen+1); i < len(s); i++ {
		tail := s[i:]
		for _, sec := range r.secrets {
			if len(tail) < len(sec) && strings.HasPrefix(sec, tail) {
				return i
			}
		}
	}
	return len(s)
}

// Stream redacts the events of one log stream, in order, and passes them
// to emit. It is safe for concurrent use.
type Stream struct {
	r    *Redactor
	emit func(string)
	hold time.Duration

	mu      sync.Mutex
	pending []string
	timer   *time.Timer
}

// NewStream returns a Stream that emits redacted events. An event held
// back because it ends like the start of a secret is released after hold
// at the latest, so a plugin that goes quiet does not hide its last line.
func (r *Redactor) NewStream(hold time.Duration, emit func(string)) *Stream {
	return &Stream{r: r, emit: emit, hold: hold}
}

// Add takes one event.
func (s *Stream) Add(text string) {
	if s.r.Empty() {
		s.emit(text)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, text)
	joined := strings.Join(s.pending, "")
	covered := s.r.cover(joined)
	held := s.r.heldFrom(joined)
	// A match that ends inside the held tail cannot be partial.
	for held < len(joined) && covered[held] {
		held++
	}
	// Emit the events that end before the held tail begins; an event the
	// tail starts in waits whole, since a line cannot be cut in two.
	off, n := 0, 0
	for _, e := range s.pending {
		if off+len(e) > held {
			break
		}
		s.emit(maskRange(joined, covered, off, off+len(e)))
		off += len(e)
		n++
	}
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.stopTimer()
		return
	}
	if s.timer == nil && s.hold > 0 {
		s.timer = time.AfterFunc(s.hold, s.Flush)
	}
}

// Flush emits every held event, redacted as far as what arrived allows.
func (s *Stream) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopTimer()
	if len(s.pending) == 0 {
		return
	}
	joined := strings.Join(s.pending, "")
	covered := s.r.cover(joined)
	off := 0
	for _, e := range s.pending {
		s.emit(maskRange(joined, covered, off, off+len(e)))
		off += len(e)
	}
	s.pending = nil
}

func (s *Stream) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}
