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
