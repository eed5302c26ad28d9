package config

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestGraphLevelsAndDownstream(t *testing.T) {
	// sandbox -> {db, cache}; api needs db and cache (a diamond); web
	// needs api; docs is an unrelated branch.
	g := NewGraph(map[string][]string{
		"sandbox": nil,
		"db":      {"sandbox"},
		"cache":   {"sandbox"},
		"api":     {"db", "cache", "sandbox"},
		"web":     {"api", "sandbox"},
		"docs":    {"sandbox"},
	})
	if got, want := fmt.Sprint(g.Levels()), "[[sandbox] [cache db docs] [api] [web]]"; got != want {
		t.Errorf("levels = %s, want %s", got, want)
	}
	if got, want := g.Downstream("db"), []string{"db", "api", "web"}; !slices.Equal(got, want) {
		t.Errorf("downstream of db = %v, want %v", got, want)
	}
	if got, want := g.Downstream("docs"), []string{"docs"}; !slices.Equal(got, want) {
		t.Errorf("downstream of docs = %v, want %v", got, want)
	}
	if got := g.Downstream("nope"); len(got) != 0 {
		t.Errorf("downstream of an unknown node = %v", got)
	}
	if c := g.Cycles(); len(c) != 0 {
		t.Errorf("cycles in a DAG: %v", c)
	}
}

func TestGraphCycleLeavesOutItsNodes(t *testing.T) {
	g := NewGraph(map[string][]string{"a": {"c"}, "b": {"a"}, "c": {"b"}, "x": nil, "y": {"a"}})
	if got, want := fmt.Sprint(g.Cycles()), "[[a c b a]]"; got != want {
		t.Errorf("cycles = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(g.Order()), "[x]"; got != want {
		t.Errorf("order = %s, want %s (nodes on or after a cycle cannot be ordered)", got, want)
	}
}

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
	} {
		s, err := ParseSchedule(c.spec)
		if err != nil {
			t.Errorf("%s: %v", c.spec, err)
			continue
		}
		if got := s.Next(at).Format(time.RFC3339); got != c.next {
			t.Errorf("%s: next = %s, want %s", c.spec, got, c.next)
		}
	}
	for _, bad := range []string{"* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *", "5-1 * * * *", "@often", "x * * * *"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
