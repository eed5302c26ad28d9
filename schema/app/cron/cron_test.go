package cron

import (
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 7, 30, 0, time.UTC) // a Saturday
	for _, c := range []struct{ spec, next string }{
		{"*/15 * * * *", "2026-11-21T10:15:00Z"},
		{"0 * * * *", "2026-11-21T11:00:00Z"},
		{"@daily", "2026-11-22T00:00:00Z"},
		{"30 9 * * mon-fri", "2026-11-23T09:30:00Z"},
		{"0 0 1 jan *", "2027-01-01T00:00:00Z"},
		{"0 12 * * 7", "2026-11-22T12:00:00Z"},
		{"0 0 29 2 *", "2028-02-29T00:00:00Z"},
		{"5,10 8-9 * * *", "2026-11-22T08:05:00Z"},
		{"0 0 13 * fri", "2026-11-27T00:00:00Z"}, // either day field matches
		{"0 0 * * 1/2", "2026-11-23T00:00:00Z"},  // Monday, Wednesday, Friday: not Sunday as 7
	} {
		s, err := Parse(c.spec)
		if err != nil {
			t.Errorf("%s: %v", c.spec, err)
			continue
		}
		if got := s.Next(at).Format(time.RFC3339); got != c.next {
			t.Errorf("%s: next = %s, want %s", c.spec, got, c.next)
		}
	}
	for _, bad := range []string{"* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *", "5-1 * * * *", "@often", "x * * * *"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
