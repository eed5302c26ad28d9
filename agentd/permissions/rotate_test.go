package permissions

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/identity"
)

var errCrash = errors.New("crash")

// agentLoad is what an agent starting on dir checks: its identity, the
// rotation under way (if any), and both control files with the keys it
// then holds; and what the customer's commands see. It returns the key
// the agent would hold.
func agentLoad(t *testing.T, dir string, wantState State, wantGrants int) identity.Identity {
	t.Helper()
	id, err := identity.Load(dir)
	if err != nil {
		t.Fatalf("load identity: %v", err)
	}
	r, err := identity.PendingRotation(dir, id)
	if err != nil {
		t.Fatalf("pending rotation: %v", err)
	}
	k := KeyOf(id)
	if r != nil {
		k.Next = r.Public()
	}
	st, _, err := LoadWith(dir, k, 0)
	if err != nil || !st.Equal(wantState) {
		t.Fatalf("the agent's permissions: %+v, %v; want %+v", st, err, wantState)
	}
	gs, _, err := LoadGrantsWith(dir, k, 0)
	if err != nil || len(gs.Grants) != wantGrants {
		t.Fatalf("the agent's grants: %+v, %v", gs, err)
	}
	for _, s := range Verify(dir) {
		if s.Err != nil {
			t.Fatalf("agentd permissions verify: %s: %v", s.Path, s.Err)
		}
	}
	return id
}

// A rotation of the agent's key stopped after any of its steps (a kill)
// leaves an agent that starts with the old or the new key and every
// control file verifying; taken up again, it completes, after which
// only the new key checks the files, and a file the old key signs is
// refused.
func TestRotationCrashSafe(t *testing.T) {
	steps := []string{"begun", "resigned " + FileName, "resigned " + GrantsFileName, "saved identity", ""}
	for _, crashAt := range steps {
		t.Run(cmpName(crashAt), func(t *testing.T) {
			dir, id0 := enrolled(t, "ag-1")
			mustUpdate(t, dir, func(s *State) { s.Maintenance = false; s.Windows = []string{"Sat 02:00-06:00 UTC"} })
			if _, err := UpdateGrants(dir, func(g *Grants) error {
				g.Grants = append(g.Grants, Grant{ID: "g1", Role: "support", RequestedBy: "bob", ApprovedBy: "alice", ApprovedAt: t0, ExpiresAt: t0.Add(time.Hour)})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			r, err := identity.BeginRotation(dir, t0, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := identity.BeginRotation(dir, t0, "alice"); !errors.Is(err, identity.ErrRotationPending) {
				t.Fatalf("a second rotation: %v", err)
			}
			if crashAt != "begun" {
				rotationStep = func(s string) error {
					if s == crashAt {
						return errCrash
					}
					return nil
				}
				_, _, err = CommitRotation(dir, id0, r, t0.Add(time.Minute))
				rotationStep = nil
				if crashAt != "" && !errors.Is(err, errCrash) {
					t.Fatalf("commit stopped at %q: %v", crashAt, err)
				}
				if crashAt == "" && err != nil {
					t.Fatal(err)
				}
			}
			// After the kill: the agent starts, and every file verifies.
			id := agentLoad(t, dir, want, 1)
			committed := crashAt == "saved identity" || crashAt == ""
			if got := id.PrivateKey.Equal(r.PrivateKey); got != committed {
				t.Fatalf("identity.json holds the next key: %v, want %v", got, committed)
			}
			if !committed {
				// The agent takes the rotation up again (once imsd has
				// the next key) and completes it.
				p, err := identity.PendingRotation(dir, id)
				if err != nil || p == nil || !p.PrivateKey.Equal(r.PrivateKey) {
					t.Fatalf("the rotation under way after the kill: %v, %v", p, err)
				}
				if _, _, err := CommitRotation(dir, id, *p, t0.Add(2*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			// Done: the next key alone checks every file; the rotation
			// file is gone (or goes at the next look).
			id = agentLoad(t, dir, want, 1)
			if !id.PrivateKey.Equal(r.PrivateKey) || !slices.Equal(id.PreviousKeyIDs, []string{keyIDOf(id0)}) || id.KeyRotatedAt.IsZero() {
				t.Fatalf("identity after the rotation: previous %v, rotated %v", id.PreviousKeyIDs, id.KeyRotatedAt)
			}
			if p, err := identity.PendingRotation(dir, id); p != nil || err != nil {
				t.Fatalf("a rotation still under way: %v, %v", p, err)
			}
			if err := identity.DropRotation(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, identity.RotationFileName)); !os.IsNotExist(err) {
				t.Fatalf("%s left: %v", identity.RotationFileName, err)
			}
			if _, _, err := LoadWith(dir, KeyOf(id), 0); err != nil {
				t.Fatalf("permissions with the new key only: %v", err)
			}
			if _, _, err := LoadGrantsWith(dir, KeyOf(id), 0); err != nil {
				t.Fatalf("grants with the new key only: %v", err)
			}
			// The old key no longer checks anything, and a file it signs
			// is refused.
			if _, _, err := LoadWith(dir, KeyOf(id0), 0); err == nil {
				t.Fatal("the old key still checks the permission file")
			}
			if err := permissionsFile.write(dir, KeyOf(id0), 99, Default()); err != nil {
				t.Fatal(err)
			}
			refused(t, firstErr(Verify(dir)), "was signed with key")
			// The customer's commands sign with the new key from now on.
			if _, err := Reset(dir, t0, "alice"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := LoadWith(dir, KeyOf(id), 0); err != nil {
				t.Fatalf("after reset: %v", err)
			}
		})
	}
}

// A rotation file the agent's key did not endorse is refused, and so is
// a control file signed with its key.
func TestRotationNotEndorsed(t *testing.T) {
	dir, id := enrolled(t, "ag-1")
	other, _ := enrolled(t, "ag-1")
	if _, err := identity.BeginRotation(other, t0, "mallory"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(other, identity.RotationFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, identity.RotationFileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.PendingRotation(dir, id); err == nil {
		t.Fatal("a rotation endorsed by another agent's key is taken")
	}
	if _, err := Update(dir, t0, "alice", func(*State) {}); err == nil {
		t.Fatal("a command signs while a forged rotation file lies there")
	}
}

func firstErr(ss []Status) error {
	for _, s := range ss {
		if s.Err != nil {
			return s.Err
		}
	}
	return nil
}

func keyIDOf(id identity.Identity) string {
	return identity.KeyIDOf(id.PrivateKey)
}

func cmpName(s string) string {
	if s == "" {
		return "completed"
	}
	return s
}
