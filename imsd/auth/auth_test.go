package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/rpc/agentproto"
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

// The agent reads when imsd made a bundle or a job from its id (to
// refuse a bundle older than a job it ran): it reads back the
// millisecond NewSortableID was given, and nothing from another form.
func TestSortableIDTime(t *testing.T) {
	for _, at := range []time.Time{time.UnixMilli(0), time.UnixMilli(1_700_000_000_123), time.UnixMilli(1<<47 - 1)} {
		for _, prefix := range []string{"job_", "bdl_"} {
			id := NewSortableID(prefix, at)
			got, ok := agentproto.IDTime(id)
			if !ok || !got.Equal(at) {
				t.Errorf("IDTime(%s) = %v, %v; made at %v", id, got, ok, at)
			}
		}
	}
	for _, bad := range []string{"", "job_", "j1", "job_once", "JOB_" + strings.Repeat("0", 26), "job_" + strings.Repeat("w", 26), "job_" + strings.Repeat("0", 27)} {
		if got, ok := agentproto.IDTime(bad); ok {
			t.Errorf("IDTime(%q) = %v, true", bad, got)
		}
	}
}
