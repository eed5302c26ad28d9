package backoff

import (
	"context"
	"testing"
	"time"
)

func TestBoundsDoubleUpToMax(t *testing.T) {
	// Rand returning its argument shows the bound itself.
	b := &Backoff{Min: 100 * time.Millisecond, Max: time.Second, Rand: func(n time.Duration) time.Duration { return n }}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("Next #%d = %v; want %v", i+1, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("Next after Reset = %v; want the minimum", got)
	}
}

func TestFullJitter(t *testing.T) {
	// The real random source: every delay within [0, bound], and spread
	// over the whole range (not only its upper half).
	b := New(time.Second, time.Second)
	var low, high int
	for range 2000 {
		d := b.Next()
		if d < 0 || d > time.Second {
			t.Fatalf("delay %v outside [0, 1s]", d)
		}
		if d < 250*time.Millisecond {
			low++
		}
		if d > 750*time.Millisecond {
			high++
		}
	}
	// Each quarter holds ~500 of 2000; 300 is far outside chance.
	if low < 300 || high < 300 {
		t.Fatalf("delays not spread over [0, 1s]: %d below 250ms, %d above 750ms of 2000", low, high)
	}
}

func TestWait(t *testing.T) {
	if !Wait(context.Background(), time.Millisecond) {
		t.Fatal("Wait with a live context returned false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Wait(ctx, time.Hour) {
		t.Fatal("Wait with a cancelled context returned true")
	}
	if time.Since(start) > time.Second {
		t.Fatal("Wait did not return when its context ended")
	}
}
