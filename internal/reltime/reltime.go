// Package reltime renders durations and instants relative to now the way a
// person reads them in a table: "45s", "3m10s", "in 6m54s", "2h ago". The
// operator's CLI and the customer's agentd commands share it, so a grant
// or a job reads the same on both sides.
package reltime

import (
	"fmt"
	"time"
)

// Duration renders d with one or two units: 45s, 3m10s, 2h5m, 3d4h. Below
// ten minutes seconds still matter; above, they are dropped.
func Duration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d.Hours())/24, int(d.Hours())%24
		if h == 0 || days >= 10 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}

// Flag renders d, to the second, as a duration flag takes it back
// exactly (time.ParseDuration): 30m, 1h30m, 24h, 25s, 1h0m5s is 1h5s.
func Flag(d time.Duration) string {
	d = d.Round(time.Second)
	if d <= 0 {
		return "0s"
	}
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	out := ""
	if h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	if m > 0 {
		out += fmt.Sprintf("%dm", m)
	}
	if s > 0 {
		out += fmt.Sprintf("%ds", s)
	}
	return out
}

// Since renders t against now: "in 6m54s" for a future t, "2m ago" for a
// past one, "" for the zero time.
func Since(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + Duration(-d)
	}
	return Duration(d) + " ago"
}
