package operatorapi

import (
	"testing"
	"time"

	"github.com/byoc-dev/byoc/schema/app/cron"
)

// NEXT CHECK is the tick the scheduler fires next: before the first
// check, the first tick after the deploy, even when it is due already and
// waits for the scheduler's pass (issue 29 item 6: it showed the tick
// after, counting from now).
func TestNextDriftCheck(t *testing.T) {
	sc, err := cron.Parse("* * * * *")
	if err != nil {
		t.Fatal(err)
	}
	at := func(hms string) time.Time {
		tm, err := time.Parse("15:04:05", hms)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		tick, deployed, now, want string
	}{
		{"", "10:00:30", "10:00:40", "10:01:00"},
		{"", "10:00:30", "10:01:10", "10:01:00"}, // due, the pass not run yet
		{"10:01:00", "10:00:30", "10:01:10", "10:02:00"},
	} {
		var tick time.Time
		if tc.tick != "" {
			tick = at(tc.tick)
		}
		if got := nextDriftCheck(sc, tick, at(tc.deployed), at(tc.now)); !got.Equal(at(tc.want)) {
			t.Errorf("tick %q deployed %s now %s: next %s, want %s", tc.tick, tc.deployed, tc.now, got.Format("15:04:05"), tc.want)
		}
	}
}
