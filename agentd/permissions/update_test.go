package permissions

import (
	"strings"
	"testing"
	"time"
)

func TestUpdatePolicyRefusal(t *testing.T) {
	sun4 := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC) // a Sunday
	mon4 := sun4.Add(24 * time.Hour)
	win, err := NormalizeWindow("Sun 03:00-05:00")
	if err != nil || win != "Sun 03:00-05:00 UTC" {
		t.Fatalf("window %q %v", win, err)
	}
	for _, c := range []struct {
		p       UpdatePolicy
		version string
		now     time.Time
		byHand  bool
		want    string // "" allowed, else part of the refusal
	}{
		{UpdatePolicy{}, "1.5.0", sun4, true, ""},
		{UpdatePolicy{}, "1.5.0", sun4, false, "manual"},
		{UpdatePolicy{Pin: "1.4.2"}, "1.4.2", sun4, false, ""},
		{UpdatePolicy{Pin: "1.4.2"}, "1.5.0", sun4, true, "pins version 1.4.2"},
		{UpdatePolicy{Allow: ">=1.4 <2"}, "1.9.1", sun4, false, ""},
		{UpdatePolicy{Allow: ">=1.4 <2"}, "2.0.0", sun4, false, "allows versions >=1.4 <2"},
		{UpdatePolicy{Allow: ">=1.4 <2"}, "v1.3.0", sun4, true, "allows versions"},
		{UpdatePolicy{Allow: ">=1.4 <2", Window: win}, "1.5.0", sun4, false, ""},
		{UpdatePolicy{Allow: ">=1.4 <2", Window: win}, "1.5.0", mon4, false, "window Sun 03:00-05:00 UTC is closed; it next opens 2026-12-06T03:00:00Z"},
		{UpdatePolicy{Allow: ">=1.4 <2"}, "1.5", sun4, false, "semantic version"},
		{UpdatePolicy{Allow: "nonsense"}, "1.5.0", sun4, false, "unreadable"},
	} {
		got := c.p.Refusal(c.version, c.now, c.byHand)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s, %s at %s (by hand %v): %q, want %q", c.p, c.version, c.now, c.byHand, got, c.want)
		}
	}
	if err := (UpdatePolicy{Pin: "1.4.2", Allow: ">=1"}).Check(); err == nil {
		t.Error("pin and range accepted together")
	}
}
