package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
)

// agentd breakglass: usage errors say what is wrong (exit 2); with imsd
// unreachable, list shows the grants this agent approved and revoke still
// ends the grant here (exit 1, saying imsd was not told).
func TestBreakglassCommand(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := breakglassCmd(context.Background(), args, &out, &errOut, func() time.Time { return now }); code != want {
			t.Fatalf("agentd breakglass %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", dir, "grant", "x"}, `unknown command "grant"`},
		{[]string{"--state-dir", dir, "approve"}, "want 1 argument(s), got 0"},
		{[]string{"--state-dir", dir, "deny", "bg_1"}, "--reason is required"},
		{[]string{"--state-dir", dir, "revoke", "bg_1", "--for", "1m"}, "--for is for approve only"},
		{[]string{"list"}, "--state-dir is required"},
	} {
		if out := run(2, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("%v: %q, want %q", c.args, out, c.want)
		}
	}
	if out := run(1, "--state-dir", dir, "list"); !strings.Contains(out, "identity") {
		t.Fatalf("list before enrolment: %s", out)
	}

	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	imsdKey, _, _ := ed25519.GenerateKey(nil)
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{imsdKey}}); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.UpdateGrants(dir, func(gs *permissions.Grants) error {
		gs.Grants = append(gs.Grants, permissions.Grant{ID: "bg_1", Role: "debugger", RequestedBy: "ops", ApprovedBy: "alice",
			ApprovedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "list", "--state-dir", dir); !lineHas(out, "bg_1", "approved", "debugger", "alice") || !strings.Contains(out, "shown: the grants this agent approved") {
		t.Fatalf("list with imsd away:\n%s", out)
	}
	out := run(1, "revoke", "bg_1", "--state-dir", dir, "--reason", "done")
	if !strings.Contains(out, "revoked bg_1") || !strings.Contains(out, "the revocation holds in this account all the same") {
		t.Fatalf("revoke with imsd away:\n%s", out)
	}
	gs, err := permissions.LoadGrants(dir)
	if err != nil || gs.Grants[0].RevokedAt.IsZero() || gs.Grants[0].RevokeReason != "done" {
		t.Fatalf("grants after revoke: %+v, %v", gs, err)
	}
	if _, live := gs.Live(now); live {
		t.Fatal("the revoked grant is still live")
	}
	if out := run(1, "revoke", "bg_1", "--state-dir", dir); !strings.Contains(out, "already revoked") {
		t.Fatalf("second revoke: %s", out)
	}

	// A grant written by hand is refused, and no command builds on it.
	if err := os.WriteFile(permissions.GrantsPath(dir), []byte(`{"grants":[{"id":"bg_2","role":"admin","requested_by":"v","approved_by":"v","approved_at":"2026-11-23T12:00:00Z","expires_at":"2099-01-01T00:00:00Z"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(1, "list", "--state-dir", dir); !strings.Contains(out, "breakglass.json is not signed") || !strings.Contains(out, "refuses every job") || lineHas(out, "bg_2", "approved") {
		t.Fatalf("list with a hand-written grant:\n%s", out)
	}
	if out := run(1, "revoke", "bg_2", "--state-dir", dir); !strings.Contains(out, "breakglass.json is not signed") {
		t.Fatalf("revoke of a hand-written grant: %s", out)
	}
}
