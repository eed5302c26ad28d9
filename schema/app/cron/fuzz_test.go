package cron

import (
	"strconv"
	"strings"
	"testing"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// FuzzScheduleAgainstRobfig checks Parse and Next against
// github.com/robfig/cron/v3 (ParseStandard, the five-field form), a
// maintained parser used by many Go schedulers: for any spec both accept
// or both refuse it, and when both accept, the next fireTimes fire times
// after a start time agree.
//
// Where we differ on purpose, the fuzzer checks our side and does not ask
// robfig (see divergence):
//   - a day of week of 7 is Sunday, as in Vixie cron and crontab(5);
//     robfig allows 0-6 only;
//   - spaces around the spec are ignored (" @daily ");
//   - @every and CRON_TZ=/TZ= are robfig's extensions, not ours: schedules
//     run in UTC;
//   - robfig reads "*-5" as "*" (it ignores what follows "*-") and skips
//     empty list items ("1,,2", ",5", even ","); we refuse both as typos;
//   - a day-of-month or day-of-week field leaves the day unrestricted only
//     when it is exactly * or ? (POSIX: "if either field is restricted,
//     both are matched"); robfig also counts a list with a * part ("*,5")
//     and */1 as unrestricted. Both accept such specs, but the either-day
//     rule can differ, so their fire times are not compared.
func FuzzScheduleAgainstRobfig(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "*/15 * * * *", "0 * * * *", "@daily", "@hourly", "@weekly", "@monthly", "@yearly",
		"@annually", "@midnight", "30 9 * * mon-fri", "0 0 1 jan *", "0 12 * * 7", "0 0 29 2 *",
		"5,10 8-9 * * *", "0 0 13 * fri", "1/2 * * * *", "0 0 * * 1/2", "0 0 * * 2/5", "0 0 30 2 *",
		"59 23 31 12 sun", "0-59/7 0-23/5 1-31/3 1-12/2 0-6/4", "? ? ? ? ?", "0 0 * * 5-7",
		"60 * * * *", "* 24 * * *", "*/0 * * * *", "5-1 * * * *", "@often", "x * * * *", "* * * *",
		"@every 1h", "CRON_TZ=UTC * * * * *", "*-5 * * * *", "0 0 *,5 * 1", "0 0 */1 * 1", " @daily ",
		"1,,2 * * * *", "1-2-3 * * * *", "*/2/3 * * * *", "+5 * * * *", "0 0 1 * */2",
	} {
		f.Add(s, int64(1795000000))
	}
	f.Fuzz(compareWithRobfig)
}

// FuzzScheduleTokens is FuzzScheduleAgainstRobfig on specs built from
// bytes, field by field, which random strings seldom are: a list of one to
// three items, each *, ?, a value, a range, a value or range with a step,
// or */step; values run one past each field's bounds and use names for
// months and days of week.
func FuzzScheduleTokens(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add([]byte{0, 3, 10, 5, 1, 1, 7, 2, 4, 3, 2, 1, 4, 4, 1, 9, 3}, int64(1795000000))
	f.Add([]byte{2, 1, 1, 200, 1, 3, 5, 2, 0, 2, 2, 3, 4, 9, 11, 1, 4, 5, 9, 2}, int64(-1795000000))
	f.Fuzz(func(t *testing.T, data []byte, start int64) {
		compareWithRobfig(t, specOf(data), start)
	})
}

// specOf builds a five-field spec from data (see FuzzScheduleTokens).
func specOf(data []byte) string {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		c := data[0]
		data = data[1:]
		return int(c)
	}
	bounds := []struct {
		lo, hi int
		names  []string
	}{
		{0, 59, nil}, {0, 23, nil}, {1, 31, nil},
		{1, 12, []string{"jan", "Feb", "MAR", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
		{0, 7, []string{"sun", "Mon", "TUE", "wed", "thu", "fri", "sat"}},
	}
	var fields []string
	for _, b := range bounds {
		value := func() string {
			c := next()
			if b.names != nil && c%4 == 0 {
				return b.names[c/4%len(b.names)]
			}
			return strconv.Itoa(b.lo - 1 + c%(b.hi-b.lo+3))
		}
		star := func() string { return [...]string{"*", "?"}[next()%2] }
		step := func() string { return strconv.Itoa(next() % 9) }
		var items []string
		for range 1 + next()%3 {
			switch next() % 7 {
			case 0:
				items = append(items, star())
			case 1, 2:
				items = append(items, value())
			case 3:
				items = append(items, value()+"-"+value())
			case 4:
				items = append(items, value()+"/"+step())
			case 5:
				items = append(items, value()+"-"+value()+"/"+step())
			case 6:
				items = append(items, star()+"/"+step())
			}
		}
		fields = append(fields, strings.Join(items, ","))
	}
	return strings.Join(fields, " ")
}

// compareWithRobfig is the differential check of both fuzz targets.
func compareWithRobfig(t *testing.T, spec string, start int64) {
	t.Helper()
	ours, oerr := Parse(spec)
	if why := divergence(spec); why != "" {
		// Our side still must not fail in its own way.
		if oerr == nil {
			checkNext(t, spec, ours, start)
		}
		return
	}
	theirs, terr := robfig.ParseStandard(spec)
	if (oerr == nil) != (terr == nil) {
		t.Fatalf("%q: we say %v, robfig says %v", spec, oerr, terr)
	}
	if oerr != nil {
		return
	}
	from := time.Unix(start%(200*365*24*3600), 0).UTC() // 1770-2170
	a, b := from, from
	for i := range fireTimes {
		a, b = ours.Next(a), theirs.Next(b)
		if !a.Equal(b) {
			t.Fatalf("%q: fire time %d after %s: we say %s, robfig says %s", spec, i+1, from, a, b)
		}
		if a.IsZero() {
			return
		}
	}
}

// fireTimes is how many fire times the fuzzer compares.
const fireTimes = 5

// divergence says why robfig's answer for spec is not ours to match, or
// "" when it is.
func divergence(spec string) string {
	s := strings.TrimSpace(spec)
	if s != spec {
		return "surrounding spaces"
	}
	if strings.HasPrefix(s, "@every") || strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		return "robfig's extensions"
	}
	f := strings.Fields(s)
	if len(f) != 5 {
		return ""
	}
	for _, field := range f {
		for part := range strings.SplitSeq(field, ",") {
			if part == "" {
				return "robfig skips empty list items"
			}
			if strings.HasPrefix(part, "*-") || strings.HasPrefix(part, "?-") {
				return "robfig reads *-x as *"
			}
		}
	}
	for _, day := range []string{f[2], f[4]} {
		if day == "*" || day == "?" {
			continue
		}
		for part := range strings.SplitSeq(day, ",") {
			_, step, hasStep := strings.Cut(part, "/")
			if (strings.HasPrefix(part, "*") || strings.HasPrefix(part, "?")) && (!hasStep || strings.TrimLeft(step, "+0") == "1") {
				return "robfig's unrestricted day fields"
			}
		}
	}
	for part := range strings.SplitSeq(f[4], ",") {
		rng, _, _ := strings.Cut(part, "/")
		for v := range strings.SplitSeq(rng, "-") {
			if strings.TrimLeft(v, "+0") == "7" {
				return "7 is Sunday"
			}
		}
	}
	return ""
}

// checkNext checks what holds of any schedule: fire times are whole UTC
// minutes, each after the one before.
func checkNext(t *testing.T, spec string, s Schedule, start int64) {
	t.Helper()
	at := time.Unix(start%(200*365*24*3600), 0).UTC()
	for range fireTimes {
		n := s.Next(at)
		if n.IsZero() {
			return
		}
		if !n.After(at) || n.Second() != 0 || n.Nanosecond() != 0 || n.Location() != time.UTC {
			t.Fatalf("%q: next after %s is %s", spec, at, n)
		}
		at = n
	}
}
