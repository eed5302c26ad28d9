package reltime

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{3 * time.Second, "3s"},
		{90 * time.Second, "1m30s"},
		{5 * time.Minute, "5m"},
		{42*time.Minute + 10*time.Second, "42m"},
		{2*time.Hour + 5*time.Minute, "2h5m"},
		{50 * time.Hour, "2d2h"},
		{300 * time.Hour, "12d"},
	}
	for _, tt := range tests {
		if got := Duration(tt.d); got != tt.want {
			t.Errorf("Duration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestSince(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, ""},
		{now.Add(6*time.Minute + 54*time.Second), "in 6m54s"},
		{now.Add(-2 * time.Minute), "2m ago"},
		{now, "0s ago"},
	} {
		if got := Since(now, tt.t); got != tt.want {
			t.Errorf("Since(%v) = %q, want %q", tt.t, got, tt.want)
		}
	}
}

// Flag's output is a duration flag's input, giving back the same duration.
func TestFlag(t *testing.T) {
	for d, want := range map[time.Duration]string{30 * time.Minute: "30m", 90 * time.Minute: "1h30m", 24 * time.Hour: "24h",
		25 * time.Second: "25s", time.Hour + 5*time.Second: "1h5s", 0: "0s", 1500 * time.Millisecond: "2s"} {
		got := Flag(d)
		back, err := time.ParseDuration(got)
		if got != want || err != nil || back != d.Round(time.Second) {
			t.Errorf("Flag(%s) = %q (parses back to %s, %v), want %q", d, got, back, err, want)
		}
	}
}
