package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesWithinBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 800 * time.Millisecond}
	for i, step := range []time.Duration{100, 200, 400, 800, 800, 800} {
		step *= time.Millisecond
		for range 50 {
			c := b
			d := c.Next()
			if d < step/2 || d > step {
				t.Fatalf("try %d: wait %s, want between %s and %s", i, d, step/2, step)
			}
		}
		b.Next()
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after Reset: wait %s, want at most Min", d)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported the full wait on a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep did not report the full wait")
	}
}
