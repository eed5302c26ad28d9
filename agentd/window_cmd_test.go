package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
)

// agentd window: set, show (open or closed, next opening), clear, kept
// in the signed permission file beside the modes; bad windows name the
// part that is wrong and change nothing.
func TestWindowCommand(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC) // a Saturday, 01:00 in Berlin
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := windowCmd(args, &out, &errOut, now); code != want {
			t.Fatalf("agentd window %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	if out := run(0, "--state-dir", dir, "show"); !strings.Contains(out, "none: jobs of a release may run at any time") {
		t.Fatalf("show with none:\n%s", out)
	}
	out := run(0, "--state-dir", dir, "set", "Sat 02:00-06:00 Europe/Berlin", "sun  00:00-24:00   UTC")
	if !strings.Contains(out, "  Sat 02:00-06:00 Europe/Berlin\n  sun 00:00-24:00 UTC\n") ||
		!strings.Contains(out, "Now:        closed: jobs of a release are refused; next opens 2026-11-28T01:00:00Z (in 1h0m0s)") {
		t.Fatalf("set:\n%s", out)
	}
	st, err := permissions.Load(dir)
	if err != nil || !slices.Equal(st.Windows, []string{"Sat 02:00-06:00 Europe/Berlin", "sun 00:00-24:00 UTC"}) || !st.Maintenance {
		t.Fatalf("stored %+v, %v", st, err)
	}
	now = now.Add(2 * time.Hour)
	if out := run(0, "show", "--state-dir", dir); !strings.Contains(out, "Now:        open, until 2026-11-28T05:00:00Z") {
		t.Fatalf("show inside:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", dir, "set"}, "give at least one window"},
		{[]string{"--state-dir", dir, "set", "Sat 02:00-06:00 Mars/Olympus"}, `time zone "Mars/Olympus"`},
		{[]string{"--state-dir", dir, "set", "Sat 02:00-06:00 UTC", "Sta 01:00-02:00 UTC"}, `[1]: window "Sta 01:00-02:00 UTC": days "Sta"`},
		{[]string{"--state-dir", dir, "open"}, `unknown command "open"`},
	} {
		if out := run(2, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: %q lacks %q", c.args, out, c.want)
		}
	}
	if st2, _ := permissions.Load(dir); !st2.Equal(st) {
		t.Fatalf("a refused set changed the file: %+v", st2)
	}
	if out := run(0, "--state-dir", dir, "clear"); !strings.Contains(out, "none:") {
		t.Fatalf("clear:\n%s", out)
	}
	if st, _ := permissions.Load(dir); len(st.Windows) != 0 || !st.Maintenance {
		t.Fatalf("after clear: %+v", st)
	}
}
