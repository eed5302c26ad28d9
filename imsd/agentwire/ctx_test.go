package agentwire

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestStreamCtx: children made from a stream's context (as each database
// query on it makes) are held only while they live, and all end with the
// stream.
func TestStreamCtx(t *testing.T) {
	sc := newStreamCtx()
	child, cancelChild := context.WithCancel(sc)
	if n := len(sc.afters); n != 1 {
		t.Fatalf("a child of the stream's context: %d registered, want 1 (through AfterFunc)", n)
	}
	cancelChild()
	if sc.afters != nil {
		t.Fatalf("after the child is done the stream's context still holds %d (cap %d)", len(sc.afters), cap(sc.afters))
	}
	if child.Err() == nil {
		t.Fatal("the cancelled child is not done")
	}
	if sc.Err() != nil {
		t.Fatalf("the stream's context ended with its child: %v", sc.Err())
	}

	live, stop := context.WithTimeout(sc, time.Hour)
	defer stop()
	ran := make(chan struct{})
	context.AfterFunc(sc, func() { close(ran) })
	sc.cancel()
	sc.cancel() // twice is harmless
	if !errors.Is(sc.Err(), context.Canceled) {
		t.Fatalf("Err after the stream ended: %v", sc.Err())
	}
	for name, done := range map[string]<-chan struct{}{"stream": sc.Done(), "child": live.Done(), "AfterFunc": ran} {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not done 5s after the stream ended", name)
		}
	}
	if !errors.Is(live.Err(), context.Canceled) {
		t.Fatalf("the child's Err: %v, want context.Canceled", live.Err())
	}
	late, cancelLate := context.WithCancel(sc)
	defer cancelLate()
	select {
	case <-late.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a child made after the stream ended is not done")
	}
	if sc.afters != nil {
		t.Fatal("the ended stream's context holds functions")
	}
}
