package agent

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// journalHas reports whether the agent's journal in dir holds a record
// of kind about file name whose data contains want.
func journalHas(t *testing.T, dir, kind, name, want string) bool {
	t.Helper()
	for _, r := range agentJournal(t, dir) {
		if r.Kind == kind && r.Subject == permissions.Subject(name) && strings.Contains(r.Data, want) {
			return true
		}
	}
	return false
}

// flip rewrites the file at path by hand, replacing old with new.
func flip(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(b, []byte(old), []byte(new), 1)
	if bytes.Equal(b, edited) {
		t.Fatalf("%s holds no %s:\n%s", path, old, b)
	}
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The permission file edited behind the agent's back (break_glass
// flipped on, as vendor code with write access to the state dir would)
// is refused: every job is refused, naming the file and why, the agent
// reports everything disabled and journals the refusal. The customer's
// reset brings jobs back.
func TestAgentRefusesAHandEditedPermissionFile(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{welcome: &agentv1.Welcome{InstallId: "ins_1", HeartbeatIntervalMs: 5000, LeaseDurationMs: 30000}}
	a := startFake(t, f, rr)
	setPermissions(t, a, func(s *permissions.State) {})
	fs := <-f.streams
	if why := a.refusal("provision"); why != "" {
		t.Fatalf("the customer's signed file: %s", why)
	}
	flip(t, permissions.Path(a.cfg.StateDir), `"break_glass": false`, `"break_glass": true`)

	fs.down <- f.assignMode("job_p", 7, "provision")
	acceptAck(t, fs, "job_p")
	r := fs.result(t)
	if r.Outcome != agentv1.Outcome_OUTCOME_REFUSED || !strings.Contains(r.Error, permissions.Path(a.cfg.StateDir)) ||
		!strings.Contains(r.Error, "signature does not verify") || !strings.Contains(r.Error, "every job is refused") {
		t.Fatalf("a job while the permission file is tampered with: %v", r)
	}
	fs.down <- accepted(r.WriteId)
	if started, _ := rr.get(); len(started) != 0 {
		t.Fatalf("a plugin started: %v", started)
	}
	if !journalHas(t, a.cfg.StateDir, permissions.KindRefused, permissions.FileName, "signature does not verify") {
		t.Fatal("the refusal is not in the agent's journal")
	}
	if p := a.permissionsProto(); !p.DisabledAll || p.BreakGlass {
		t.Fatalf("reported to imsd: %v, want disabled", p)
	}

	if _, err := permissions.Reset(a.cfg.StateDir, time.Now(), "alice"); err != nil {
		t.Fatal(err)
	}
	fs.down <- f.assignMode("job_q", 8, "provision")
	acceptAck(t, fs, "job_q")
	eventually(t, "job_q to start after reset", func() bool { s, _ := rr.get(); return len(s) == 1 && s[0] == "job_q" })
}

// A break-glass grant written into breakglass.json by hand is refused:
// not only the break_glass job, every job.
func TestAgentRefusesAHandWrittenGrant(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	a := startFake(t, f, rr)
	setPermissions(t, a, func(s *permissions.State) { s.BreakGlass = true })
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := writeFile(permissions.GrantsPath(a.cfg.StateDir), `{"grants":[{"id":"bg_evil","role":"admin","requested_by":"vendor","approved_by":"root","approved_at":"2026-11-27T20:00:00Z","expires_at":"`+until+`"}]}`); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"break_glass", "provision"} {
		if why := a.refusal(mode); !strings.Contains(why, "breakglass.json is not signed") || !strings.Contains(why, "every job is refused") {
			t.Fatalf("a %s job with a hand-written grant: %q", mode, why)
		}
	}
	if !journalHas(t, a.cfg.StateDir, permissions.KindRefused, permissions.GrantsFileName, "is not signed") {
		t.Fatal("the refusal is not in the agent's journal")
	}
}

// An earlier signed copy put back (break_glass on) is refused, also by an
// agent restarted since (it reads the generation it accepted from its
// journal); removing the file does not bring the defaults back.
func TestAgentRefusesARolledBackOrRemovedFile(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	dir := t.TempDir()
	a, stop := startFakeIn(t, f, rr, dir, nil)
	setPermissions(t, a, func(s *permissions.State) { s.BreakGlass = true })
	if why := a.refusal("provision"); why != "" {
		t.Fatal(why)
	}
	old, err := os.ReadFile(permissions.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	setPermissions(t, a, func(s *permissions.State) { s.BreakGlass = false })
	if why := a.refusal("provision"); why != "" {
		t.Fatal(why)
	}
	if !journalHas(t, dir, permissions.KindAccepted, permissions.FileName, `"generation":"2"`) {
		t.Fatal("generation 2 is not journalled as accepted")
	}
	if err := os.WriteFile(permissions.Path(dir), old, 0o600); err != nil {
		t.Fatal(err)
	}
	want := "generation 1, older than generation 2, which this agent accepted"
	if why := a.refusal("provision"); !strings.Contains(why, want) {
		t.Fatalf("rolled back: %q", why)
	}
	stop()
	a, stop = startFakeIn(t, f, rr, dir, nil)
	if why := a.refusal("provision"); !strings.Contains(why, want) {
		t.Fatalf("rolled back, after a restart: %q", why)
	}
	if err := os.Remove(permissions.Path(dir)); err != nil {
		t.Fatal(err)
	}
	if why := a.refusal("provision"); !strings.Contains(why, "is missing, but this agent accepted its generation 2") {
		t.Fatalf("removed: %q", why)
	}
	if p := a.permissionsProto(); !p.DisabledAll {
		t.Fatalf("reported: %v", p)
	}
	stop()
}

// Another agent's signed file copied in is refused.
func TestAgentRefusesAnotherAgentsFile(t *testing.T) {
	rr := &runRecorder{release: make(chan struct{})}
	defer close(rr.release)
	f := &fakeIMS{}
	a := startFake(t, f, rr)
	other := t.TempDir()
	key, _ := identity.NewKey()
	if err := identity.Save(other, identity.Identity{AgentID: "agt_2", InstallID: "ins_2", PrivateKey: key,
		IMSDKeys: []ed25519.PublicKey{f.key.Public().(ed25519.PublicKey)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := permissions.UpdateGrants(other, func(gs *permissions.Grants) error {
		gs.Grants = append(gs.Grants, permissions.Grant{ID: "bg_2", Role: "admin", ApprovedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(permissions.GrantsPath(other))
	if err := os.WriteFile(permissions.GrantsPath(a.cfg.StateDir), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if why := a.refusal("maintenance"); !strings.Contains(why, "signed for agent agt_2 (install ins_2), not for this agent agt_1") {
		t.Fatalf("another agent's grants: %q", why)
	}
}
