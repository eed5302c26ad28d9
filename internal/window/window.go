// Package window is maintenance windows: when an install may be changed.
// A window is days, a wall-clock time range and an IANA time zone:
//
//	Sat 02:00-06:00 Europe/Berlin
//	Mon-Fri 22:00-02:00 America/New_York   (ends 02:00 the next day)
//	Sat,Sun 00:00-24:00 UTC
//	daily 03:00-04:00 Asia/Tokyo           (also "*")
//
// Days are Mon..Sun (or full names, any case), ranges (Mon-Fri, Fri-Mon)
// and lists of both. Times are wall clock in the zone, so a window keeps
// its local hours across daylight saving changes. A Schedule is several
// windows; it is open when any of them is, and an empty Schedule is
// always open (no window set: no restriction).
//
// The vendor sets an install's windows (installs/NAME.toml, window =),
// the customer the agent's (agentd window set); imsd holds a release's
// jobs until both are open (NextBoth), and the agent refuses one outside
// the customer's. It imports only the standard library (and time/tzdata,
// so zone names resolve on a machine without a zoneinfo database).
package window

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // zone names resolve in a container without /usr/share/zoneinfo
)

// Window is one weekly window.
type Window struct {
	days       [7]bool // by time.Weekday
	start, end int     // minutes from midnight; end may be <= start (next day) or 1440
	loc        *time.Location
	text       string
}

// String is the window as it was written, normalised ("Sat 02:00-06:00
// Europe/Berlin").
func (w Window) String() string { return w.text }

// Schedule is a set of windows; it is open when any window is.
type Schedule struct {
	windows []Window
}

// Empty says whether s has no window (it is then always open).
func (s *Schedule) Empty() bool { return s == nil || len(s.windows) == 0 }

// Windows returns s's windows.
func (s *Schedule) Windows() []Window {
	if s == nil {
		return nil
	}
	return slices.Clone(s.windows)
}

// String lists the windows, separated by "; "; "always" when empty.
func (s *Schedule) String() string {
	if s.Empty() {
		return "always"
	}
	parts := make([]string, len(s.windows))
	for i, w := range s.windows {
		parts[i] = w.text
	}
	return strings.Join(parts, "; ")
}

var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
var longDayNames = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

func parseDay(s string) (int, bool) {
	l := strings.ToLower(s)
	for i := range dayNames {
		if l == dayNames[i] || l == longDayNames[i] {
			return i, true
		}
	}
	return 0, false
}

func parseClock(s string) (int, bool) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) == 0 || len(h) > 2 || len(m) != 2 {
		return 0, false
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, false
	}
	return hh*60 + mm, true
}

// Parse reads one window. The error names the part that is wrong.
func Parse(text string) (Window, error) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return Window{}, fmt.Errorf("window %q: want DAYS HH:MM-HH:MM ZONE, such as \"Sat 02:00-06:00 Europe/Berlin\"", text)
	}
	var w Window
	if d := strings.ToLower(f[0]); d == "daily" || d == "*" {
		for i := range w.days {
			w.days[i] = true
		}
	} else {
		for part := range strings.SplitSeq(f[0], ",") {
			from, to, isRange := strings.Cut(part, "-")
			a, ok1 := parseDay(from)
			b, ok2 := a, true
			if isRange {
				b, ok2 = parseDay(to)
			}
			if !ok1 || !ok2 {
				return Window{}, fmt.Errorf("window %q: days %q: want Mon..Sun, a range such as Mon-Fri, a list such as Sat,Sun, or daily", text, f[0])
			}
			for i := a; ; i = (i + 1) % 7 {
				w.days[i] = true
				if i == b {
					break
				}
			}
		}
	}
	from, to, ok := strings.Cut(f[1], "-")
	var ok1, ok2 bool
	w.start, ok1 = parseClock(from)
	w.end, ok2 = parseClock(to)
	switch {
	case !ok || !ok1 || !ok2:
		return Window{}, fmt.Errorf("window %q: time range %q: want HH:MM-HH:MM (24-hour, such as 02:00-06:00 or 22:00-02:00; 24:00 ends at midnight)", text, f[1])
	case w.start == w.end:
		return Window{}, fmt.Errorf("window %q: time range %q is empty (start and end are the same)", text, f[1])
	case w.start == 24*60:
		return Window{}, fmt.Errorf("window %q: time range %q starts at 24:00; write 00:00 on the next day", text, f[1])
	}
	loc, err := time.LoadLocation(f[2])
	if err != nil || f[2] == "" || strings.EqualFold(f[2], "local") {
		return Window{}, fmt.Errorf("window %q: time zone %q is not an IANA time zone name (such as Europe/Berlin, America/New_York or UTC)", text, f[2])
	}
	w.loc = loc
	w.text = fmt.Sprintf("%s %s %s", f[0], f[1], f[2])
	return w, nil
}

// ParseSchedule reads several windows; the error names the one that is
// wrong by its index. No windows is the empty (always open) Schedule.
func ParseSchedule(texts []string) (*Schedule, error) {
	s := &Schedule{}
	for i, t := range texts {
		w, err := Parse(t)
		if err != nil {
			if len(texts) > 1 {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			return nil, err
		}
		s.windows = append(s.windows, w)
	}
	return s, nil
}

// MustParseSchedule is ParseSchedule for windows written in code.
func MustParseSchedule(texts ...string) *Schedule {
	s, err := ParseSchedule(texts)
	if err != nil {
		panic(err)
	}
	return s
}

// spans calls f with each interval of w that starts on a local day from
// the day before t's to days after it, in order.
func (w Window) spans(t time.Time, days int, f func(start, end time.Time) bool) {
	lt := t.In(w.loc)
	y, m, d := lt.Date()
	for k := -1; k <= days; k++ {
		day := time.Date(y, m, d+k, 0, 0, 0, 0, w.loc)
		if !w.days[day.Weekday()] {
			continue
		}
		start := time.Date(y, m, d+k, w.start/60, w.start%60, 0, 0, w.loc)
		endDay := d + k
		if w.end <= w.start {
			endDay++
		}
		end := time.Date(y, m, endDay, w.end/60, w.end%60, 0, 0, w.loc)
		if !f(start, end) {
			return
		}
	}
}

// Contains says whether w is open at t.
func (w Window) Contains(t time.Time) bool {
	in := false
	w.spans(t, 0, func(start, end time.Time) bool {
		in = !t.Before(start) && t.Before(end)
		return !in
	})
	return in
}

// Contains says whether s is open at t (an empty s always is).
func (s *Schedule) Contains(t time.Time) bool {
	if s.Empty() {
		return true
	}
	for _, w := range s.windows {
		if w.Contains(t) {
			return true
		}
	}
	return false
}

// Next returns the first time at or after t when s is open: t itself
// while it is open.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.Contains(t) {
		return t
	}
	return s.NextOpening(t)
}

// NextOpening returns when the next window of s opens after t (the start
// of a window, strictly after t); t for an empty s.
func (s *Schedule) NextOpening(t time.Time) time.Time {
	if s.Empty() {
		return t
	}
	var best time.Time
	for _, w := range s.windows {
		w.spans(t, 8, func(start, _ time.Time) bool {
			if start.After(t) {
				if best.IsZero() || start.Before(best) {
					best = start
				}
				return false
			}
			return true
		})
	}
	return best
}

// CloseAfter returns when s, open at t, next closes: the latest end of
// the windows that hold t, followed through windows that start before it
// ends; t when s is closed at t; the zero time for an empty s (never).
func (s *Schedule) CloseAfter(t time.Time) time.Time {
	if s.Empty() {
		return time.Time{}
	}
	end := t
	for range 64 {
		moved := false
		for _, w := range s.windows {
			w.spans(end, 1, func(start, e time.Time) bool {
				if !end.Before(start) && end.Before(e) {
					end, moved = e, true
				}
				return true
			})
		}
		if !moved {
			break
		}
	}
	return end
}

// horizon bounds NextBoth's search: schedules that never overlap within
// it are reported as never open together.
const horizon = 400 * 24 * time.Hour

// NextBoth returns the first time at or after t when every schedule is
// open (t while all are), and false when they are not open together
// within a year or so (windows that never overlap).
func NextBoth(t time.Time, ss ...*Schedule) (time.Time, bool) {
	cand := t
	for cand.Sub(t) < horizon {
		moved := false
		for _, s := range ss {
			if n := s.Next(cand); n.After(cand) {
				cand, moved = n, true
			}
		}
		if !moved {
			return cand, true
		}
	}
	return time.Time{}, false
}
