package operatorapi

import (
	"testing"
	"time"
)

// A caller's refusal records are rate limited: the burst is written,
// then one per refusalEvery, and the first written after a gap says how
// many were left out; another caller has its own budget.
func TestRefusalRecordsAreRateLimited(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	r := &refusals{now: func() time.Time { return now }, actors: map[string]*actorRefusals{}}
	for i := range refusalBurst {
		if ok, n := r.allow("token:a"); !ok || n != 0 {
			t.Fatalf("refusal %d of the burst: allowed %v, suppressed %d", i, ok, n)
		}
	}
	for range 25 {
		if ok, _ := r.allow("token:a"); ok {
			t.Fatal("a refusal past the burst was allowed at once")
		}
	}
	if ok, _ := r.allow("token:b"); !ok {
		t.Fatal("another caller's refusal was held back")
	}
	now = now.Add(refusalEvery)
	if ok, n := r.allow("token:a"); !ok || n != 25 {
		t.Fatalf("after %v: allowed %v, suppressed %d; want true, 25", refusalEvery, ok, n)
	}
	if ok, _ := r.allow("token:a"); ok {
		t.Fatal("two refusals allowed within refusalEvery after the burst")
	}
}
