// Package cron parses the schedules of cron triggers (five fields or a
// macro such as @daily, in UTC) and finds their next fire time. The
// validator checks trigger schedules with Parse; imsd's scheduler runs
// them with Schedule.Next.
package cron

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A Schedule is a parsed five-field cron expression.
type Schedule struct {
	minute, hour, dom, month, dow uint64 // bit sets
	// domStar and dowStar record a "*" day field: cron matches either day
	// field when both are restricted, and only the other when one is "*".
	domStar, dowStar bool
}

var cronMacros = map[string]string{
	"@hourly":   "0 * * * *",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@weekly":   "0 0 * * 0",
	"@monthly":  "0 0 1 * *",
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
}

var monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
var dayNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// Parse parses a cron expression: five fields (minute, hour,
// day of month, month, day of week) with *, lists, ranges, steps and
// month and day names, or one of @hourly, @daily, @weekly, @monthly,
// @yearly. Times are UTC.
func Parse(spec string) (Schedule, error) {
	s := strings.TrimSpace(spec)
	if m, ok := cronMacros[s]; ok {
		s = m
	} else if strings.HasPrefix(s, "@") {
		return Schedule{}, fmt.Errorf("unknown macro %q (use @hourly, @daily, @weekly, @monthly or @yearly)", s)
	}
	f := strings.Fields(s)
	if len(f) != 5 {
		return Schedule{}, fmt.Errorf("has %d fields; cron needs 5: minute hour day-of-month month day-of-week", len(f))
	}
	var sc Schedule
	var err error
	specs := []struct {
		name   string
		lo, hi int
		// last ends * and N/step: a day of week of 7 is Sunday only
		// when written, so "1/2" is Monday, Wednesday and Friday.
		last  int
		names map[string]int
		dst   *uint64
	}{
		{"minute", 0, 59, 59, nil, &sc.minute},
		{"hour", 0, 23, 23, nil, &sc.hour},
		{"day of month", 1, 31, 31, nil, &sc.dom},
		{"month", 1, 12, 12, monthNames, &sc.month},
		{"day of week", 0, 7, 6, dayNames, &sc.dow},
	}
	for i, fs := range specs {
		if *fs.dst, err = cronField(f[i], fs.lo, fs.hi, fs.last, fs.names); err != nil {
			return Schedule{}, fmt.Errorf("%s %q: %v", fs.name, f[i], err)
		}
	}
	if sc.dow&(1<<7) != 0 { // 7 is Sunday too
		sc.dow |= 1
	}
	sc.domStar, sc.dowStar = f[2] == "*" || f[2] == "?", f[4] == "*" || f[4] == "?"
	return sc, nil
}

// cronField parses one field whose values run from lo to hi; * and N/step
// run to last.
func cronField(s string, lo, hi, last int, names map[string]int) (uint64, error) {
	var bits uint64
	for part := range strings.SplitSeq(s, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("step %q is not a positive number", stepS)
			}
			step = n
		}
		var from, to int
		switch {
		case rng == "*" || rng == "?":
			from, to = lo, last
		default:
			// One hyphen at most: Atoi takes "-0", so "0--0" would read
			// as the range 0-0 where cron (and robfig) refuse it.
			if strings.Count(rng, "-") > 1 {
				return 0, fmt.Errorf("range %q has more than one hyphen", rng)
			}
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if from, err = cronValue(a, lo, hi, names); err != nil {
				return 0, err
			}
			to = from
			if isRange {
				if to, err = cronValue(b, lo, hi, names); err != nil {
					return 0, err
				}
				if to < from {
					return 0, fmt.Errorf("range %s runs backwards", rng)
				}
			} else if hasStep {
				to = max(from, last)
			}
		}
		for v := from; v <= to; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, nil
}

func cronValue(s string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d is outside %d-%d", v, lo, hi)
	}
	return v, nil
}

// Next returns the first time after t (in UTC, to the minute) that the
// schedule matches, or the zero time if none within five years.
func (sc Schedule) Next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(5, 0, 0)
	for t.Before(limit) {
		if sc.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !sc.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if sc.hour&(1<<uint(t.Hour())) == 0 {
			t = t.Truncate(time.Hour).Add(time.Hour)
			continue
		}
		if sc.minute&(1<<uint(t.Minute())) == 0 {
			t = t.Add(time.Minute)
			continue
		}
		return t
	}
	return time.Time{}
}

func (sc Schedule) dayMatches(t time.Time) bool {
	dom := sc.dom&(1<<uint(t.Day())) != 0
	dow := sc.dow&(1<<uint(t.Weekday())) != 0
	switch {
	case sc.domStar && sc.dowStar:
		return true
	case sc.domStar:
		return dow
	case sc.dowStar:
		return dom
	}
	return dom || dow
}
