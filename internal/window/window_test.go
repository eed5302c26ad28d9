package window

import (
	"strings"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestContainsAndNext(t *testing.T) {
	// 2026-11-28 is a Saturday; Berlin is UTC+1 in winter.
	s := MustParseSchedule("Sat 02:00-06:00 Europe/Berlin")
	for _, tc := range []struct {
		t        string
		in       bool
		next     string
		opening  string
		closeAft string
	}{
		{"2026-11-28T00:59:59Z", false, "2026-11-28T01:00:00Z", "2026-11-28T01:00:00Z", "2026-11-28T00:59:59Z"},
		{"2026-11-28T01:00:00Z", true, "2026-11-28T01:00:00Z", "2026-12-05T01:00:00Z", "2026-11-28T05:00:00Z"},
		{"2026-11-28T04:59:59Z", true, "2026-11-28T04:59:59Z", "2026-12-05T01:00:00Z", "2026-11-28T05:00:00Z"},
		{"2026-11-28T05:00:00Z", false, "2026-12-05T01:00:00Z", "2026-12-05T01:00:00Z", "2026-11-28T05:00:00Z"},
		// Summer time: the window keeps its local hours (UTC+2).
		{"2027-06-05T00:30:00Z", true, "2027-06-05T00:30:00Z", "2027-06-12T00:00:00Z", "2027-06-05T04:00:00Z"},
	} {
		now := at(tc.t)
		if got := s.Contains(now); got != tc.in {
			t.Errorf("Contains(%s) = %v", tc.t, got)
		}
		if got := s.Next(now); !got.Equal(at(tc.next)) {
			t.Errorf("Next(%s) = %s, want %s", tc.t, got.UTC().Format(time.RFC3339), tc.next)
		}
		if got := s.NextOpening(now); !got.Equal(at(tc.opening)) {
			t.Errorf("NextOpening(%s) = %s, want %s", tc.t, got.UTC().Format(time.RFC3339), tc.opening)
		}
		if got := s.CloseAfter(now); !got.Equal(at(tc.closeAft)) {
			t.Errorf("CloseAfter(%s) = %s, want %s", tc.t, got.UTC().Format(time.RFC3339), tc.closeAft)
		}
	}
}

func TestAcrossMidnightAndLists(t *testing.T) {
	s := MustParseSchedule("Mon-Fri 22:00-02:00 UTC", "sat,SUNDAY 00:00-24:00 UTC")
	for ts, want := range map[string]bool{
		"2026-11-27T23:00:00Z": true,  // Friday night
		"2026-11-28T01:00:00Z": true,  // Saturday (whole day) and Friday's tail
		"2026-11-30T01:59:00Z": false, // Monday morning: Sunday ended at midnight, and Sunday is not Mon-Fri
		"2026-11-30T12:00:00Z": false, // Monday noon
		"2026-11-30T22:00:00Z": true,
		"2026-12-01T02:00:00Z": false,
	} {
		if got := s.Contains(at(ts)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", ts, got, want)
		}
	}
	// Friday 22:00 through Sunday's end is one stretch.
	if got := s.CloseAfter(at("2026-11-27T23:00:00Z")); !got.Equal(at("2026-11-30T00:00:00Z")) {
		t.Errorf("CloseAfter = %s", got)
	}
	d := MustParseSchedule("daily 03:00-04:00 Asia/Tokyo")
	if got := d.Next(at("2026-11-28T00:00:00Z")); !got.Equal(at("2026-11-28T18:00:00Z")) {
		t.Errorf("daily Next = %s", got)
	}
	var empty *Schedule
	if !empty.Contains(at("2026-11-28T00:00:00Z")) || !MustParseSchedule().Contains(time.Now()) {
		t.Error("an empty schedule is always open")
	}
}

func TestNextBoth(t *testing.T) {
	vendor := MustParseSchedule("Sat 02:00-06:00 Europe/Berlin") // 01:00-05:00 UTC
	customer := MustParseSchedule("Sat 04:00-08:00 UTC")
	got, ok := NextBoth(at("2026-11-27T12:00:00Z"), vendor, customer)
	if !ok || !got.Equal(at("2026-11-28T04:00:00Z")) {
		t.Errorf("NextBoth = %s, %v", got, ok)
	}
	got, ok = NextBoth(at("2026-11-28T04:30:00Z"), vendor, customer)
	if !ok || !got.Equal(at("2026-11-28T04:30:00Z")) {
		t.Errorf("NextBoth inside both = %s, %v", got, ok)
	}
	if _, ok := NextBoth(at("2026-11-27T12:00:00Z"), vendor, MustParseSchedule("Sun 04:00-08:00 UTC")); ok {
		t.Error("windows that never overlap are open together")
	}
	if got, ok := NextBoth(at("2026-11-27T12:00:00Z"), nil, customer); !ok || !got.Equal(at("2026-11-28T04:00:00Z")) {
		t.Errorf("NextBoth with no vendor window = %s", got)
	}
}

func TestParseErrorsNameThePart(t *testing.T) {
	for text, want := range map[string]string{
		"Sta 02:00-06:00 UTC":          `days "Sta"`,
		"Sat 02:00 UTC":                `time range "02:00"`,
		"Sat 2:00-25:00 UTC":           `time range "2:00-25:00"`,
		"Sat 02:00-02:00 UTC":          `is empty`,
		"Sat 02:00-06:00 Europe/Berln": `time zone "Europe/Berln"`,
		"Sat 02:00-06:00":              `want DAYS HH:MM-HH:MM ZONE`,
		"Sat 02:00-06:00 Local":        `time zone "Local"`,
		"Mon-Fry 02:00-06:00 UTC":      `days "Mon-Fry"`,
		"Sat 24:00-02:00 UTC":          `starts at 24:00`,
	} {
		_, err := Parse(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", text, err, want)
		}
	}
	if _, err := ParseSchedule([]string{"Sat 02:00-06:00 UTC", "bad"}); err == nil || !strings.HasPrefix(err.Error(), "[1]: ") {
		t.Errorf("ParseSchedule names the index: %v", err)
	}
	w, err := Parse("  Fri-Mon   22:00-24:00   UTC ")
	if err != nil || w.String() != "Fri-Mon 22:00-24:00 UTC" || !w.Contains(at("2026-11-30T23:00:00Z")) || w.Contains(at("2026-12-01T23:00:00Z")) {
		t.Errorf("Fri-Mon: %v %v", w, err)
	}
}

// Parse never panics; what it accepts reads back the same, and Next is
// open and never before its argument.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"Sat 02:00-06:00 Europe/Berlin", "Mon-Fri 22:00-02:00 UTC", "daily 00:00-24:00 UTC", "Fri-Mon,Wed 23:59-00:01 Asia/Tokyo", "x"} {
		f.Add(s, int64(1795000000))
	}
	f.Fuzz(func(t *testing.T, text string, unix int64) {
		w, err := Parse(text)
		if err != nil {
			return
		}
		again, err := Parse(w.String())
		if err != nil || again.String() != w.String() {
			t.Fatalf("%q reads back as %q: %v", w.String(), again.String(), err)
		}
		now := time.Unix(unix%(1<<34), 0)
		s := &Schedule{windows: []Window{w}}
		n := s.Next(now)
		if n.Before(now) || !s.Contains(n) {
			t.Fatalf("%s: Next(%s) = %s, open %v", w, now, n, s.Contains(n))
		}
	})
}
