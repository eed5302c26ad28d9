package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// TestReadyWhilePoolIsHeld: imsd's /readyz (Store.Ready) answers while
// every connection of the hot path's pool is taken, as in a hello storm.
// It used to read through that pool: a balancer's health check then
// timed out, took every replica out, and the agents could not come back
// (bench ReconnectStormReplicas, 3,000 agents: 0 back after 3 minutes).
func TestReadyWhilePoolIsHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping PostgreSQL")
	}
	ctx := context.Background()
	s, err := store.Open(ctx, pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release, err := store.HoldPool(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// The pool is full: a read through it waits (the check this test
	// can fail on).
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := s.CountAPITokens(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a read through the held pool: %v, want it to wait", err)
	}
	ready, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := s.Ready(ready); err != nil {
		t.Fatalf("Ready with the pool held: %v", err)
	}
}
