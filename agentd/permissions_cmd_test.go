package main

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
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
	if !st.Equal(want) {
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

// verify, adopt and reset: an old unsigned file is refused with a message
// saying how to sign it; adopt signs it as it is; a hand edit is refused
// by verify and by every change, and reset writes the defaults signed.
func TestPermissionsVerifyAdoptReset(t *testing.T) {
	dir := t.TempDir()
	key, _ := identity.NewKey()
	imsdKey, _, _ := ed25519.GenerateKey(nil)
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", PrivateKey: key, IMSDKeys: []ed25519.PublicKey{imsdKey}}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := permissionsCmd(append([]string{"--state-dir", dir}, args...), &out, &errOut, now); code != want {
			t.Fatalf("agentd permissions %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	if out := run(0, "verify"); !strings.Contains(out, "none (the defaults)") {
		t.Fatalf("verify, fresh:\n%s", out)
	}
	if err := os.WriteFile(permissions.Path(dir), []byte(`{"provision":true,"maintenance":false,"deprovision":true,"break_glass":false,"disabled_all":false}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "show"); !strings.Contains(out, "permissions.json is not signed") || !strings.Contains(out, "agentd permissions adopt") {
		t.Fatalf("show of an unsigned file:\n%s", out)
	}
	if out := run(1, "verify"); !lineHas(out, "REFUSED", "permissions.json is not signed") || !strings.Contains(out, "refuses every job") {
		t.Fatalf("verify of an unsigned file:\n%s", out)
	}
	if out := run(0, "adopt"); !strings.Contains(out, "Signed "+permissions.Path(dir)+" as it was") || !lineHas(out, "maintenance", "off") {
		t.Fatalf("adopt:\n%s", out)
	}
	if out := run(0, "verify"); !lineHas(out, "ok", "permissions.json", "generation 1") {
		t.Fatalf("verify after adopt:\n%s", out)
	}
	b, _ := os.ReadFile(permissions.Path(dir))
	os.WriteFile(permissions.Path(dir), bytes.Replace(b, []byte(`"break_glass": false`), []byte(`"break_glass": true`), 1), 0o600)
	if out := run(1, "verify"); !lineHas(out, "REFUSED", "signature does not verify") {
		t.Fatalf("verify of a hand-edited file:\n%s", out)
	}
	if out := run(1, "enable", "maintenance"); !strings.Contains(out, "agentd permissions reset") {
		t.Fatalf("a change on a hand-edited file:\n%s", out)
	}
	if out := run(0, "reset"); !lineHas(out, "break_glass", "off") || !lineHas(out, "maintenance", "on") {
		t.Fatalf("reset:\n%s", out)
	}
	if out := run(0, "verify"); !lineHas(out, "ok", "permissions.json", "generation 2") {
		t.Fatalf("verify after reset:\n%s", out)
	}
}
