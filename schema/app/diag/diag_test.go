package diag

import (
	"errors"
	"testing"
)

func TestListErrSortsByRankFileLineAndDropsRepeats(t *testing.T) {
	l := &List{Rank: func(f string) int {
		if f == "app.toml" {
			return 0
		}
		return 1
	}}
	if l.Err() != nil {
		t.Fatal("an empty list is an error")
	}
	l.Addf("b.toml", 3, "k", "", "third")
	l.Addf("a.toml", 9, "", "", "second")
	l.Addf("b.toml", 3, "k", "", "third")
	l.Addf("app.toml", 5, "name", "write %q", "first %d", 1)
	var e *Error
	if !errors.As(l.Err(), &e) {
		t.Fatalf("%T", l.Err())
	}
	want := "3 problems in app config:\n  app.toml:5: name: first 1 (write %q)\n  a.toml:9: second\n  b.toml:3: k: third"
	if got := e.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestDidYouMean(t *testing.T) {
	for _, c := range []struct {
		got  string
		want string
	}{
		{"nmae", `did you mean "name"?`}, // a swap is one edit
		{"Type", `did you mean "type"?`}, // case does not count
		{"x", ""},                        // too far from everything
		{"dependencies", ""},             // not close enough to "description"
	} {
		if got := DidYouMean(c.got, []string{"name", "type", "description"}); got != c.want {
			t.Errorf("%q: got %q, want %q", c.got, got, c.want)
		}
	}
	if got := QuoteList([]string{"a", "b", "c"}); got != `"a", "b" or "c"` {
		t.Errorf("QuoteList = %s", got)
	}
}

// Warnings are not errors: a list of warnings alone is no error, and
// each kind comes back sorted apart from the other.
func TestWarningsAreNotErrors(t *testing.T) {
	l := &List{}
	w := Diagnostic{File: "components/b.toml", Line: 4, Key: "config.size", Message: "is deprecated", Hint: "set replicas instead", Severity: SeverityWarning}
	l.Add(w)
	l.Add(Diagnostic{File: "components/a.toml", Line: 9, Message: "is deprecated", Severity: SeverityWarning})
	l.Add(w)
	if err := l.Err(); err != nil {
		t.Fatalf("warnings alone: %v", err)
	}
	l.Addf("app.toml", 1, "name", "", "is required")
	var e *Error
	if err := l.Err(); !errors.As(err, &e) || len(e.Diagnostics) != 1 || e.Diagnostics[0].IsWarning() {
		t.Fatalf("errors = %v, want the one error", err)
	}
	ws := l.Warnings()
	if len(ws) != 2 || ws[0].File != "components/a.toml" || !ws[1].IsWarning() {
		t.Fatalf("warnings = %+v", ws)
	}
	if got, want := ws[1].String(), "warning: components/b.toml:4: config.size: is deprecated (set replicas instead)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
