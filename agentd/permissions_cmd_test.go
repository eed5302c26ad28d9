package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/permissions"
)

// agentd permissions: flags anywhere, each command's effect on the file,
// and usage errors (exit 2) that say what is wrong.
func TestPermissionsCommand(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := permissionsCmd(args, &out, &errOut, now); code != want {
			t.Fatalf("agentd permissions %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	if out := run(0, "--state-dir", dir, "show"); !strings.Contains(out, "never (the defaults)") || !lineHas(out, "break_glass", "off") || !lineHas(out, "maintenance", "on") {
		t.Fatalf("show:\n%s", out)
	}
	run(0, "disable", "maintenance", "--state-dir", dir)
	run(0, "--state-dir="+dir, "enable", "break-glass")
	out := run(0, "disable-all", "--state-dir", dir)
	if !strings.Contains(out, "DISABLED") || !strings.Contains(out, "2026-11-23T12:00:00Z by ") {
		t.Fatalf("disable-all:\n%s", out)
	}
	st, err := permissions.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := permissions.State{Provision: true, Deprovision: true, BreakGlass: true, DisabledAll: true, ChangedAt: now, ChangedBy: st.ChangedBy}
	if st != want {
		t.Fatalf("state %+v, want %+v", st, want)
	}
	run(0, "enable-all", "--state-dir", dir)
	if st, _ := permissions.Load(dir); st.DisabledAll || st.Maintenance {
		t.Fatalf("enable-all lifts only the kill switch: %+v", st)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"show"}, "--state-dir is required"},
		{[]string{"--state-dir", dir}, "usage: agentd permissions"},
		{[]string{"--state-dir", dir, "enable"}, "want 1 argument"},
		{[]string{"--state-dir", dir, "enable", "root"}, `unknown permission mode "root"`},
		{[]string{"--state-dir", dir, "allow", "maintenance"}, `unknown command "allow"`},
	} {
		if out := run(2, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: %q, want it to say %q", c.args, out, c.want)
		}
	}
	if out := run(1, "--state-dir", dir+"/missing", "disable-all"); !strings.Contains(out, "state dir") {
		t.Errorf("a missing state dir: %q", out)
	}
}

func lineHas(s string, parts ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}
