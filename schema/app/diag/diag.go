// Package diag is how the app config packages report problems: a
// Diagnostic names the file, line and key of one problem and says what would
// be right; a List collects every problem of a config (reading never stops
// at the first); an Error is what a failed read returns. It also finds the
// "did you mean" suggestion that most hints carry.
package diag

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A Diagnostic is one problem in an app config: where it is (file
// relative to the app directory, line, key path), what is wrong and, when
// we can tell, what would be right.
type Diagnostic struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
	// Severity is "" for an error, SeverityWarning for what is worth
	// saying but lets the config through (a deprecated field).
	Severity string `json:"severity,omitempty"`
}

// SeverityWarning marks a Diagnostic as a warning: shown by app validate,
// app push and the console, and not a reason to refuse the config.
const SeverityWarning = "warning"

// IsWarning reports whether d is a warning.
func (d Diagnostic) IsWarning() bool { return d.Severity == SeverityWarning }

func (d Diagnostic) String() string {
	var b strings.Builder
	if d.IsWarning() {
		b.WriteString("warning: ")
	}
	b.WriteString(d.File)
	if d.Line > 0 {
		fmt.Fprintf(&b, ":%d", d.Line)
	}
	b.WriteString(": ")
	if d.Key != "" {
		b.WriteString(d.Key)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	if d.Hint != "" {
		b.WriteString(" (")
		b.WriteString(d.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Error is every problem found in an app config, in file and line order.
type Error struct {
	Diagnostics []Diagnostic
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Diagnostics))
	for i, d := range e.Diagnostics {
		lines[i] = d.String()
	}
	n := len(lines)
	head := "1 problem"
	if n != 1 {
		head = fmt.Sprintf("%d problems", n)
	}
	return head + " in app config:\n  " + strings.Join(lines, "\n  ")
}

// A List collects diagnostics while a config is read.
type List struct {
	// Rank orders files in Err's result (smaller first, then by name);
	// nil ranks every file alike.
	Rank func(file string) int

	list []Diagnostic
}

// Add records d.
func (l *List) Add(d Diagnostic) { l.list = append(l.list, d) }

// Addf records a diagnostic whose message is format applied to args.
func (l *List) Addf(file string, line int, key, hint, format string, args ...any) {
	l.Add(Diagnostic{File: file, Line: line, Key: key, Message: fmt.Sprintf(format, args...), Hint: hint})
}

// Err returns the collected errors (warnings left out) as an *Error,
// sorted by file (in Rank order) and line with duplicates removed, or nil
// when there are none.
func (l *List) Err() error {
	out := l.sorted(false)
	if len(out) == 0 {
		return nil
	}
	return &Error{Diagnostics: out}
}

// Warnings returns the collected warnings, sorted as Err sorts.
func (l *List) Warnings() []Diagnostic { return l.sorted(true) }

// sorted is the warnings (or the errors), by file (in Rank order) and
// line, duplicates removed.
func (l *List) sorted(warnings bool) []Diagnostic {
	var out []Diagnostic
	for _, d := range l.list {
		if d.IsWarning() == warnings {
			out = append(out, d)
		}
	}
	rank := l.Rank
	if rank == nil {
		rank = func(string) int { return 0 }
	}
	slices.SortStableFunc(out, func(a, b Diagnostic) int {
		return cmp.Or(cmp.Compare(rank(a.File), rank(b.File)), cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return slices.Compact(out)
}

// Join appends key to the key path path ("a.b" and "c" make "a.b.c").
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// DidYouMean suggests the candidate closest to got ("did you mean "x"?"),
// or returns "" when none is close.
func DidYouMean(got string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := editDistance(strings.ToLower(got), strings.ToLower(c))
		if d < bestD {
			best, bestD = c, d
		}
	}
	// Close means at most a third of the word changed (and at least one
	// edit allowed), so "nmae" finds "name" but "x" does not find "type".
	if best == "" || bestD > max(1, len(got)/3) {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", best)
}

// editDistance is the Damerau-Levenshtein distance (adjacent swaps count
// as one edit).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// QuoteList renders names for a message: "a", "b" or "c".
func QuoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	switch len(q) {
	case 0:
		return "none"
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
