// Package redact removes secret values from what a job sends back: log
// lines, errors and outputs. The agent runs it as the last step before
// anything of a job leaves it (and sdktest runs the same code), so it does
// not trust plugins to have redacted anything themselves.
//
// A plugin may send one secret in pieces, in consecutive log events of one
// stream (a chunk of output per event, or a long line split in two).
// [Stream] therefore holds back an event that ends with the beginning of a
// secret until the next event on that stream shows whether the secret
// continues, or until a short hold time passes; events never change order.
//
// A secret is also masked in the encodings a program most often prints a
// value in without meaning to reveal it: base64 (standard and URL
// alphabets, padded or not, and inside a longer base64 text at any of the
// three byte alignments: the characters that depend on the secret's bytes
// alone), URL encoding (query and path escaping) and a JSON string's
// escaping. Other encodings (hex, double encodings, a compressed or
// encrypted value) and transformations of the value are not recognised;
// neither is a secret shorter than MinLength, nor an encoded form whose
// secret-only part is shorter.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
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
// Each value and line is also redacted in its encoded forms (see the
// package doc). Values shorter than MinLength are skipped.
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
	addEncoded := func(v string) {
		if len(v) < MinLength {
			return
		}
		add(v)
		for _, e := range encodings(v) {
			add(e)
		}
	}
	for _, v := range values {
		addEncoded(v)
		if strings.ContainsAny(v, "\r\n") {
			for _, line := range strings.FieldsFunc(v, func(c rune) bool { return c == '\n' || c == '\r' }) {
				addEncoded(strings.TrimSpace(line))
			}
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// encodings returns the encoded forms of v that are redacted with it.
func encodings(v string) []string {
	var out []string
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		// Whole: v encoded on its own, padding included.
		out = append(out, enc.EncodeToString([]byte(v)))
		// Inside longer base64: with k bytes before v, the characters
		// from ceil(8k/6) to floor(8(k+len)/6) depend on v alone.
		raw := enc.WithPadding(base64.NoPadding)
		for k := range 3 {
			b := make([]byte, k, k+len(v))
			e := raw.EncodeToString(append(b, v...))
			from, to := (8*k+5)/6, 8*(k+len(v))/6
			out = append(out, e[from:to])
		}
	}
	out = append(out, url.QueryEscape(v), url.PathEscape(v))
	for _, html := range []bool{true, false} {
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(html)
		e.Encode(v)
		q := strings.TrimSuffix(b.String(), "\n")
		out = append(out, q[1:len(q)-1])
	}
	return out
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

// Event is one log line of a stream.
type Event struct {
	Stream int32
	Text   string
}

// Stream redacts a job's log events and passes them on in the order they
// came. A secret split across consecutive events of one stream is caught:
// an event that ends like the start of a secret is held back, and every
// event after it with it, until the next event of its stream shows how it
// goes on, or until the hold time passes. It is safe for concurrent use.
type Stream struct {
	r    *Redactor
	emit func(Event)
	hold time.Duration

	mu      sync.Mutex
	pending []Event
	timer   *time.Timer
}

// NewStream returns a Stream that emits redacted events. A held event is
// released after hold at the latest, so a plugin that goes quiet does not
// hide its last line.
func (r *Redactor) NewStream(hold time.Duration, emit func(Event)) *Stream {
	return &Stream{r: r, emit: emit, hold: hold}
}

// Add takes one event.
func (s *Stream) Add(e Event) {
	if s.r.Empty() {
		s.emit(e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, e)
	s.release(false)
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
	s.release(true)
}

// release emits pending events from the front, in order, up to the first
// one that must still wait (none when all is set).
func (s *Stream) release(all bool) {
	// Per stream: the pending text joined, what of it is secret, and where
	// a possibly partial secret at its end begins.
	type streamState struct {
		joined  string
		covered []bool
		held    int
	}
	states := map[int32]*streamState{}
	offsets := make([]int, len(s.pending))
	var b = map[int32]*strings.Builder{}
	for i, e := range s.pending {
		sb := b[e.Stream]
		if sb == nil {
			sb = &strings.Builder{}
			b[e.Stream] = sb
		}
		offsets[i] = sb.Len()
		sb.WriteString(e.Text)
	}
	for st, sb := range b {
		joined := sb.String()
		covered := s.r.cover(joined)
		held := len(joined)
		if !all {
			held = s.r.heldFrom(joined)
			// A match that ends inside the held tail cannot be partial.
			for held < len(joined) && covered[held] {
				held++
			}
		}
		states[st] = &streamState{joined, covered, held}
	}
	n := 0
	for i, e := range s.pending {
		st := states[e.Stream]
		from, to := offsets[i], offsets[i]+len(e.Text)
		// A line cannot be cut in two: an event the held tail starts in
		// waits whole, and so does everything after it.
		if to > st.held {
			break
		}
		s.emit(Event{Stream: e.Stream, Text: maskRange(st.joined, st.covered, from, to)})
		n++
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
}

func (s *Stream) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// Value redacts every string in a JSON-like value (a planned change's
// values: strings, lists, objects, and their keys); other values are
// returned as they are.
func (r *Redactor) Value(v any) any {
	switch v := v.(type) {
	case string:
		return r.String(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = r.Value(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[r.String(k)] = r.Value(e)
		}
		return out
	}
	return v
}
