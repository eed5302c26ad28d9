package graph

import (
	"fmt"
	"slices"
	"testing"
)

func TestGraphLevelsAndDownstream(t *testing.T) {
	// sandbox -> {db, cache}; api needs db and cache (a diamond); web
	// needs api; docs is an unrelated branch.
	g := New(map[string][]string{
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
	g := New(map[string][]string{"a": {"c"}, "b": {"a"}, "c": {"b"}, "x": nil, "y": {"a"}})
	if got, want := fmt.Sprint(g.Cycles()), "[[a c b a]]"; got != want {
		t.Errorf("cycles = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(g.Order()), "[x]"; got != want {
		t.Errorf("order = %s, want %s (nodes on or after a cycle cannot be ordered)", got, want)
	}
}
