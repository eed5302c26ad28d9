package config

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
}

func (d Diagnostic) String() string {
	var b strings.Builder
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

// diags collects diagnostics while a config is read.
type diags struct {
	list []Diagnostic
}

func (ds *diags) add(d Diagnostic) { ds.list = append(ds.list, d) }

func (ds *diags) addf(file string, line int, key, hint, format string, args ...any) {
	ds.add(Diagnostic{File: file, Line: line, Key: key, Message: fmt.Sprintf(format, args...), Hint: hint})
}

// err returns the collected diagnostics as an *Error, or nil.
func (ds *diags) err() error {
	if len(ds.list) == 0 {
		return nil
	}
	out := slices.Clone(ds.list)
	slices.SortStableFunc(out, func(a, b Diagnostic) int {
		return cmp.Or(cmp.Compare(fileRank(a.File), fileRank(b.File)), cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	out = slices.Compact(out)
	return &Error{Diagnostics: out}
}

// fileRank orders diagnostics the way the files are read: app.toml first.
func fileRank(f string) int {
	for i, name := range fileOrder {
		if f == name || strings.HasPrefix(f, name) {
			return i
		}
	}
	return len(fileOrder)
}

// didYouMean suggests the candidate closest to got, if one is close.
func didYouMean(got string, candidates []string) string {
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

// quoteList renders names for a message: "a", "b" or "c".
func quoteList(names []string) string {
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

// DidYouMean suggests the candidate closest to got ("did you mean "x"?"),
// or returns "" when none is close.
func DidYouMean(got string, candidates []string) string { return didYouMean(got, candidates) }
