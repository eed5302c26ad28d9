package permissions

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// A break_glass job runs only with the mode on and a grant live by the
// agent's clock: not before approval, not at or after its expiry, not
// once revoked.
func TestBreakGlassNeedsALiveGrant(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	on := State{BreakGlass: true, Maintenance: true}
	g := Grant{ID: "bg_1", Role: "admin", RequestedBy: "ops", ApprovedBy: "alice", ApprovedAt: now, ExpiresAt: now.Add(time.Hour)}
	live := Grants{Grants: []Grant{g}}
	revoked := g
	revoked.RevokedAt = now.Add(time.Minute)
	for _, c := range []struct {
		name   string
		st     State
		grants Grants
		at     time.Time
		want   string
	}{
		{"no grant", on, Grants{}, now, "refused: break_glass jobs need a live break-glass grant"},
		{"live grant", on, live, now.Add(30 * time.Minute), ""},
		{"at expiry", on, live, now.Add(time.Hour), "refused: break_glass jobs need a live break-glass grant"},
		{"revoked", on, Grants{Grants: []Grant{revoked}}, now.Add(2 * time.Minute), "refused: break_glass jobs need a live"},
		{"mode off", State{Maintenance: true}, live, now, "refused: break_glass is turned off"},
		{"kill switch", State{BreakGlass: true, DisabledAll: true}, live, now, "refused: the customer has disabled all jobs"},
		{"other modes ignore grants", on, Grants{}, now, ""},
	} {
		mode := "break_glass"
		if c.name == "other modes ignore grants" {
			mode = "maintenance"
		}
		got := c.st.RefusalAt(mode, c.grants, c.at)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestUpdateGrants(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	if gs, err := LoadGrants(dir); err != nil || len(gs.Grants) != 0 {
		t.Fatalf("no file: %+v, %v", gs, err)
	}
	_, err := UpdateGrants(dir, func(gs *Grants) error {
		gs.Grants = append(gs.Grants, Grant{ID: "bg_1", ApprovedAt: now, ExpiresAt: now.Add(time.Hour)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := UpdateGrants(dir, func(gs *Grants) error { gs.Grants = nil; return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed change: %v", err)
	}
	gs, err := LoadGrants(dir)
	if err != nil || len(gs.Grants) != 1 || gs.Grants[0].ID != "bg_1" {
		t.Fatalf("after a failed change: %+v, %v", gs, err)
	}
	if fi, err := os.Stat(GrantsPath(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v, %v", fi, err)
	}
	if err := os.WriteFile(GrantsPath(dir), []byte(`{"grants": [], "extra": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadGrants(dir); err == nil || !strings.Contains(err.Error(), GrantsFileName) {
		t.Errorf("a malformed file: %v, want an error naming it", err)
	}
}
