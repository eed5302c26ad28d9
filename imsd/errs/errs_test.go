package errs

import (
	"errors"
	"testing"
)

func TestPrefix(t *testing.T) {
	for _, c := range []struct {
		in   error
		want string
	}{
		{Field("install", "required"), "jobs[2].install: required"},
		{E(NotFound, "install %q not found", "x"), `jobs[2]: install "x" not found`},
	} {
		got := Prefix("jobs[2]", c.in)
		if got.Error() != c.want || CodeOf(got) != CodeOf(c.in) {
			t.Errorf("Prefix(%v) = %v (%s), want %q (%s)", c.in, got, CodeOf(got), c.want, CodeOf(c.in))
		}
	}
	plain := errors.New("disk full")
	if got := Prefix("jobs[0]", plain); got != plain {
		t.Errorf("Prefix(plain) = %v, want it unchanged", got)
	}
}
