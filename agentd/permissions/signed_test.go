package permissions

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/auditlog"
	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

var t0 = time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)

// enrolled makes a state dir holding an enrolled agent's identity.
func enrolled(t *testing.T, agentID string) (string, identity.Identity) {
	t.Helper()
	dir := t.TempDir()
	key, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	imsd, _, _ := ed25519.GenerateKey(nil)
	id := identity.Identity{AgentID: agentID, InstallID: "ins_" + agentID, IMSURL: "http://127.0.0.1:1", PrivateKey: key, IMSDKeys: []ed25519.PublicKey{imsd}}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	return dir, id
}

func refused(t *testing.T, err error, want string) *RefusedError {
	t.Helper()
	var r *RefusedError
	if !errors.As(err, &r) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want a refused control file saying %q", err, want)
	}
	return r
}

func mustUpdate(t *testing.T, dir string, change func(*State)) {
	t.Helper()
	if _, err := Update(dir, t0, "alice", change); err != nil {
		t.Fatal(err)
	}
}

// journalAccepted writes the agent's journal record of accepting
// generation gen of file name, as the agent does.
func journalAccepted(t *testing.T, dir, agentID, name string, gen string) {
	t.Helper()
	l, err := auditlog.Open(filepath.Join(auditlog.Dir(dir), auditlog.AgentFile), auditlog.AgentChain(agentID))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, _ := auditlog.EncodeData(map[string]string{"generation": gen})
	if _, err := l.Add(auditchain.Record{At: t0.UnixNano(), Kind: KindAccepted, Actor: "agent:" + agentID, Subject: Subject(name), Data: d}); err != nil {
		t.Fatal(err)
	}
}

// A permission file edited by hand (break_glass flipped on) is refused;
// the customer's own command then refuses to build on it, and reset
// writes the defaults signed.
func TestHandEditedPermissionsAreRefused(t *testing.T) {
	dir, _ := enrolled(t, "agt_1")
	mustUpdate(t, dir, func(s *State) { s.Maintenance = false })
	if st, err := Load(dir); err != nil || st.Maintenance || st.BreakGlass {
		t.Fatalf("signed file: %+v, %v", st, err)
	}
	b, err := os.ReadFile(Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(b, []byte(`"break_glass": false`), []byte(`"break_glass": true`), 1)
	if bytes.Equal(edited, b) {
		t.Fatalf("no break_glass in\n%s", b)
	}
	if err := os.WriteFile(Path(dir), edited, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	refused(t, err, "signature does not verify")
	refused(t, err, Path(dir))
	refused(t, err, "agentd permissions reset")
	if _, err := Update(dir, t0, "alice", func(s *State) { s.Maintenance = true }); !IsRefused(err) {
		t.Fatalf("a change on top of a refused file: %v", err)
	}
	if _, err := Reset(dir, t0, "alice"); err != nil {
		t.Fatal(err)
	}
	if st, err := Load(dir); err != nil || st.BreakGlass || !st.Maintenance {
		t.Fatalf("after reset: %+v, %v", st, err)
	}

	// Re-indented or re-ordered but the same content still verifies:
	// what is signed is the meaning, checked field by field.
	b, _ = os.ReadFile(Path(dir))
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(e)
	os.WriteFile(Path(dir), b, 0o600)
	if _, err := Load(dir); err != nil {
		t.Fatalf("the same file, compact: %v", err)
	}
}

// A grants file written by hand, in the format from before signing or
// signed with some other key, is refused.
func TestHandWrittenGrantIsRefused(t *testing.T) {
	dir, _ := enrolled(t, "agt_1")
	grant := `{"grants":[{"id":"bg_evil","role":"admin","requested_by":"vendor","approved_by":"root","approved_at":"2026-11-27T20:00:00Z","expires_at":"2099-01-01T00:00:00Z"}]}`
	if err := os.WriteFile(GrantsPath(dir), []byte(grant), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadGrants(dir)
	if r := refused(t, err, "is not signed"); !r.Unsigned {
		t.Fatalf("an old-format file: %+v", r)
	}
	refused(t, err, "agentd permissions adopt")

	// Signed, but with a key of the attacker's own.
	other, _ := identity.NewKey()
	k := KeyOf(identity.Identity{AgentID: "agt_1", InstallID: "ins_agt_1", PrivateKey: other})
	var gs Grants
	json.Unmarshal([]byte(grant), &gs)
	b, err := seal(k, GrantsFileName, 5, gs)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(GrantsPath(dir), b, 0o600)
	_, err = LoadGrants(dir)
	refused(t, err, "not this agent's key")
	// And with the key id set to the agent's: the signature fails.
	var e envelope
	json.Unmarshal(b, &e)
	own, _ := identity.Load(dir)
	e.KeyID = KeyID(own.PrivateKey.Public().(ed25519.PublicKey))
	b, _ = json.Marshal(e)
	os.WriteFile(GrantsPath(dir), b, 0o600)
	_, err = LoadGrants(dir)
	refused(t, err, "signature does not verify")
}

// An earlier signed copy put back (break_glass on again) is refused once
// the agent accepted a newer generation; so is the file removed.
func TestRollbackAndRemovalAreRefused(t *testing.T) {
	dir, id := enrolled(t, "agt_1")
	k := KeyOf(id)
	mustUpdate(t, dir, func(s *State) { s.BreakGlass = true })
	old, _ := os.ReadFile(Path(dir))
	mustUpdate(t, dir, func(s *State) { s.BreakGlass = false })
	st, gen, err := LoadWith(dir, k, 0)
	if err != nil || gen != 2 || st.BreakGlass {
		t.Fatalf("generation 2: %+v %d %v", st, gen, err)
	}
	os.WriteFile(Path(dir), old, 0o600)
	if st, gen, err := LoadWith(dir, k, 0); err != nil || gen != 1 || !st.BreakGlass {
		t.Fatalf("generation 1 is validly signed: %+v %d %v", st, gen, err)
	}
	_, _, err = LoadWith(dir, k, 2)
	if r := refused(t, err, "generation 1, older than generation 2"); r.Generation != 1 {
		t.Fatalf("%+v", r)
	}

	// The customer's commands read the agent's journal for the newest
	// generation it accepted.
	if _, err := Load(dir); err != nil {
		t.Fatalf("no journal yet: %v", err)
	}
	journalAccepted(t, dir, id.AgentID, FileName, "2")
	_, err = Load(dir)
	refused(t, err, "older than generation 2")
	if acc, err := Accepted(dir); err != nil || acc[FileName] != 2 {
		t.Fatalf("Accepted: %v, %v", acc, err)
	}
	// reset writes generation 3, which the agent accepts.
	if _, err := Reset(dir, t0, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, gen, err := LoadWith(dir, k, 2); err != nil || gen != 3 {
		t.Fatalf("after reset: %d, %v", gen, err)
	}

	os.Remove(Path(dir))
	_, _, err = LoadWith(dir, k, 3)
	refused(t, err, "is missing, but this agent accepted its generation 3")
	if st, gen, err := LoadWith(dir, k, 0); err != nil || gen != 0 || !st.Equal(Default()) {
		t.Fatalf("missing and never accepted: the defaults; %+v %d %v", st, gen, err)
	}

	// The grants file likewise.
	if _, err := UpdateGrants(dir, func(gs *Grants) error { gs.Grants = append(gs.Grants, Grant{ID: "bg_1"}); return nil }); err != nil {
		t.Fatal(err)
	}
	os.Remove(GrantsPath(dir))
	_, _, err = LoadGrantsWith(dir, k, 1)
	refused(t, err, "breakglass.json is missing")
}

// A file signed by another agent is refused, copied as it is or with its
// agent id changed.
func TestAnotherAgentsFileIsRefused(t *testing.T) {
	mine, _ := enrolled(t, "agt_mine")
	theirs, _ := enrolled(t, "agt_theirs")
	mustUpdate(t, theirs, func(s *State) { s.BreakGlass = true })
	b, _ := os.ReadFile(Path(theirs))
	os.WriteFile(Path(mine), b, 0o600)
	_, err := Load(mine)
	refused(t, err, "signed for agent agt_theirs (install ins_agt_theirs), not for this agent agt_mine")

	b = bytes.ReplaceAll(b, []byte("agt_theirs"), []byte("agt_mine"))
	os.WriteFile(Path(mine), b, 0o600)
	_, err = Load(mine)
	refused(t, err, "not this agent's key")

	// A permission file put in place of the grants file.
	if _, err := Reset(mine, t0, "alice"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(Path(mine))
	os.WriteFile(GrantsPath(mine), b, 0o600)
	_, err = LoadGrants(mine)
	refused(t, err, `signed as "permissions.json"`)
}

// The upgrade path: files from before signing are refused until adopt
// signs them as they are. Adopt leaves a signed file alone and does not
// sign a tampered one.
func TestAdoptSignsOldFiles(t *testing.T) {
	dir, _ := enrolled(t, "agt_1")
	os.WriteFile(Path(dir), []byte(`{"provision":true,"maintenance":false,"deprovision":true,"break_glass":false,"disabled_all":false}`), 0o600)
	os.WriteFile(GrantsPath(dir), []byte(`{"grants":[]}`), 0o600)
	_, err := Load(dir)
	refused(t, err, "is not signed")
	a, err := Adopt(dir)
	if err != nil || !a.State || !a.Grants {
		t.Fatalf("adopt: %+v, %v", a, err)
	}
	if st, err := Load(dir); err != nil || st.Maintenance || !st.Provision {
		t.Fatalf("adopted: %+v, %v", st, err)
	}
	if _, err := LoadGrants(dir); err != nil {
		t.Fatal(err)
	}
	if a, err := Adopt(dir); err != nil || a.State || a.Grants {
		t.Fatalf("adopt again: %+v, %v", a, err)
	}
	b, _ := os.ReadFile(Path(dir))
	os.WriteFile(Path(dir), bytes.Replace(b, []byte(`"maintenance": false`), []byte(`"maintenance": true`), 1), 0o600)
	if _, err := Adopt(dir); !IsRefused(err) {
		t.Fatalf("adopt of a tampered signed file: %v", err)
	}
	for _, s := range Verify(dir) {
		if strings.HasSuffix(s.Path, FileName) && s.Err == nil {
			t.Fatalf("verify: %+v", s)
		}
	}
}

// Before enrolment the customer's commands sign with a key made for the
// agent to enrol with; once enrolled with it, those files stay valid.
func TestSignedBeforeEnrolment(t *testing.T) {
	dir := t.TempDir()
	if st, err := Load(dir); err != nil || !st.Equal(Default()) {
		t.Fatalf("fresh: %+v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, identity.PendingFileName)); !os.IsNotExist(err) {
		t.Fatalf("reading made a key: %v", err)
	}
	mustUpdate(t, dir, func(s *State) { s.Maintenance = false })
	if st, err := Load(dir); err != nil || st.Maintenance {
		t.Fatalf("before enrolment: %+v, %v", st, err)
	}
	key, err := identity.EnrolmentKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	imsd, _, _ := ed25519.GenerateKey(nil)
	if err := identity.Save(dir, identity.Identity{AgentID: "agt_1", InstallID: "ins_1", PrivateKey: key, IMSDKeys: []ed25519.PublicKey{imsd}}); err != nil {
		t.Fatal(err)
	}
	if err := identity.DropPending(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := Load(dir); err != nil || st.Maintenance {
		t.Fatalf("after enrolment with the same key: %+v, %v", st, err)
	}
	mustUpdate(t, dir, func(s *State) { s.Maintenance = true })
	b, _ := os.ReadFile(Path(dir))
	if !bytes.Contains(b, []byte(`"agent_id": "agt_1"`)) {
		t.Fatalf("a write after enrolment names the agent:\n%s", b)
	}
}

// A file larger than MaxFileSize is refused unread.
func TestOversizedControlFile(t *testing.T) {
	dir, _ := enrolled(t, "agt_1")
	os.WriteFile(Path(dir), bytes.Repeat([]byte(" "), MaxFileSize+1), 0o600)
	_, err := Load(dir)
	refused(t, err, "larger than")
}

// FuzzOpenControlFile: the signed file parser never panics, accepts only
// what the key signed, and what it accepts signs again to the same.
func FuzzOpenControlFile(f *testing.F) {
	seed := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	k := KeyOf(identity.Identity{AgentID: "agt_1", InstallID: "ins_1", PrivateKey: seed})
	good, _ := seal(k, FileName, 3, Default())
	f.Add(good)
	f.Add([]byte(`{"provision":true}`))
	f.Add([]byte(`{"format":"byoc-control-file/v1","file":"permissions.json","generation":1,"content":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, gen, err := open[State](k, "/state/"+FileName, b, 2)
		if err != nil {
			if !IsRefused(err) {
				t.Fatalf("not a *RefusedError: %v", err)
			}
			return
		}
		if gen < 2 {
			t.Fatalf("accepted generation %d below 2", gen)
		}
		again, err := seal(k, FileName, gen, st)
		if err != nil {
			t.Fatal(err)
		}
		st2, gen2, err := open[State](k, "/state/"+FileName, again, 2)
		if err != nil || !st2.Equal(st) || gen2 != gen {
			t.Fatalf("re-signed: %+v %d %v, want %+v %d", st2, gen2, err, st, gen)
		}
	})
}
