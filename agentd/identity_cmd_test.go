package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
)

// agentd identity: show names the key; rotate writes the next key,
// endorsed by the current one, and refuses a second rotation while one
// is under way; --wait gives up, saying so, when no agent completes it.
func TestIdentityCommand(t *testing.T) {
	dir := t.TempDir()
	key, _ := identity.NewKey()
	imsd, _, _ := ed25519.GenerateKey(nil)
	id := identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key, IMSDKeys: []ed25519.PublicKey{imsd}}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC) }
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := identityCmd(context.Background(), args, &out, &errOut, now); code != want {
			t.Fatalf("agentd identity %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	if out := run(0, "show", "--state-dir", dir); !strings.Contains(out, "Key:        "+identity.KeyIDOf(key)) || !strings.Contains(out, "Rotation:   none under way") {
		t.Fatalf("show:\n%s", out)
	}
	out := run(0, "rotate", "--state-dir", dir)
	r, err := identity.PendingRotation(dir, id)
	if err != nil || r == nil || !strings.Contains(out, "endorsed by the current key "+identity.KeyIDOf(key)) {
		t.Fatalf("rotate: %v %v\n%s", r, err, out)
	}
	if !r.Statement(id).Verify() || r.StartedBy == "" {
		t.Fatalf("the rotation file: %+v", r)
	}
	if out := run(1, "rotate", "--state-dir", dir); !strings.Contains(out, "a rotation of the agent's key is under way already") {
		t.Fatalf("second rotate:\n%s", out)
	}
	if out := run(0, "show", "--state-dir", dir); !strings.Contains(out, "Rotation:   under way to key "+identity.KeyIDOf(r.PrivateKey)) {
		t.Fatalf("show under way:\n%s", out)
	}
	if out := run(1, "rotate", "--wait", "300ms", "--state-dir", dir); !strings.Contains(out, "did not complete the rotation within 300ms") {
		t.Fatalf("rotate --wait with no agent:\n%s", out)
	}
	if out := run(2, "spin", "--state-dir", dir); !strings.Contains(out, `unknown command "spin"`) {
		t.Fatalf("unknown command:\n%s", out)
	}
	if out := run(1, "show", "--state-dir", t.TempDir()); !strings.Contains(out, "not enrolled") {
		t.Fatalf("not enrolled:\n%s", out)
	}
}

// rotate --wait returns only once the rotation is complete: identity.json
// holds the next key AND the rotation's file is gone (the agent saves the
// key, then removes the file; --wait used to return in between, and a
// check right after it found identity-next.json still there).
func TestIdentityRotateWaitsForTheWholeCommit(t *testing.T) {
	dir := t.TempDir()
	key, _ := identity.NewKey()
	imsd, _, _ := ed25519.GenerateKey(nil)
	id := identity.Identity{AgentID: "agt_1", InstallID: "ins_1", IMSURL: "http://127.0.0.1:1", PrivateKey: key, IMSDKeys: []ed25519.PublicKey{imsd}}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC) }
	// An agent: once the rotation is written, it saves the next key, and
	// removes the rotation's file a second later.
	removed := make(chan time.Time, 1)
	go func() {
		for {
			r, err := identity.PendingRotation(dir, id)
			if err == nil && r != nil {
				next := id
				next.PrivateKey = r.PrivateKey
				if err := identity.Save(dir, next); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Second)
				removed <- time.Now()
				if err := identity.DropRotation(dir); err != nil {
					t.Error(err)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var out, errOut bytes.Buffer
	if code := identityCmd(context.Background(), []string{"rotate", "--state-dir", dir, "--wait", "30s"}, &out, &errOut, now); code != 0 {
		t.Fatalf("rotate --wait: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	select {
	case <-removed:
	default:
		t.Fatalf("rotate --wait returned before the rotation's file was removed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "Rotated:") {
		t.Fatalf("rotate --wait:\n%s", out.String())
	}
}
