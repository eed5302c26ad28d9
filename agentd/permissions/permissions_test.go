package permissions

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDefaultsAndRefusals(t *testing.T) {
	dir := t.TempDir()
	s, err := Load(dir)
	if err != nil || !s.Equal(Default()) {
		t.Fatalf("no file: %+v, %v; want the defaults", s, err)
	}
	if got := s.Short(); got != "P M D ·" {
		t.Errorf("defaults shown as %q", got)
	}
	for _, c := range []struct {
		st   State
		mode string
		want string
	}{
		{Default(), "provision", ""},
		{Default(), "", ""},
		{Default(), "maintenance", ""},
		{State{Provision: true}, "maintenance", "refused: maintenance is turned off in the customer's account"},
		{State{Provision: true}, "", "refused: maintenance is turned off in the customer's account"},
		{Default(), "break_glass", "refused: break_glass is turned off in the customer's account"},
		{State{Provision: true, DisabledAll: true}, "provision", "refused: the customer has disabled all jobs"},
		{Default(), "root", `refused: the job names unknown permission mode "root"`},
	} {
		got := c.st.RefusalAt(c.mode, Grants{}, time.Now())
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v, mode %q: %q, want %q", c.st, c.mode, got, c.want)
		}
	}
	if got := (State{Maintenance: true, BreakGlass: true}).Short(); got != "· M · B" {
		t.Errorf("Short = %q", got)
	}
	if got := (State{Provision: true, DisabledAll: true}).Short(); got != "disabled" {
		t.Errorf("Short = %q", got)
	}
	if m, err := ParseMode("Break-Glass"); err != nil || m != BreakGlass {
		t.Errorf("ParseMode: %q, %v", m, err)
	}
}

// Update writes atomically and 0600, records when and who, and loses no
// change made at the same time as another.
func TestUpdate(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for _, m := range Modes {
		wg.Go(func() {
			if _, err := Update(dir, now, "alice", func(s *State) { s.Set(m, !s.On(m)) }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := State{BreakGlass: true, ChangedAt: now, ChangedBy: "alice"}
	if !s.Equal(want) {
		t.Fatalf("after flipping every mode at once: %+v, want %+v", s, want)
	}
	fi, err := os.Stat(Path(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, %v", fi.Mode(), err)
	}
	if err := os.WriteFile(Path(dir), []byte(`{"provision": true, "root": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), FileName) {
		t.Fatalf("a file with an unknown field: %v, want an error naming it", err)
	}
}
