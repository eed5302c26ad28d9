package auth

import (
	"strings"
	"testing"
	"time"
)

func TestNewSortableID(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prevMax := ""
	for ms := range 500 {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		lo, hi := "", ""
		for range 4 {
			id := NewSortableID("job_", at)
			if !strings.HasPrefix(id, "job_") || len(id) != len("job_")+26 || strings.ToLower(id) != id {
				t.Fatalf("id %q: want job_ and 26 lower-case base32 characters", id)
			}
			if seen[id] {
				t.Fatalf("id %q minted twice", id)
			}
			seen[id] = true
			if lo == "" || id < lo {
				lo = id
			}
			hi = max(hi, id)
		}
		// Every ID of a later millisecond sorts after every earlier one.
		if lo <= prevMax {
			t.Fatalf("id %q minted at %s sorts before %q minted earlier", lo, at, prevMax)
		}
		prevMax = hi
	}
}
