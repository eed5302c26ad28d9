package store_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// A cancellation one replica passes on (NotifyCancel) reaches every
// other replica's ListenCancels, reason and all (a long one truncated);
// on SQLite both do nothing.
func TestCancelsReachOtherReplicas(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan [3]string, 4)
	kicked := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- b.ListenCancels(ctx, store.ReplicaNotes{
			Cancel: func(agent, job, reason string) { got <- [3]string{agent, job, reason} },
			Kick:   func(agent string) { kicked <- agent },
			Hello:  func(agent, instance, host string) { got <- [3]string{agent, instance, host} },
		})
	}()
	long := strings.Repeat("r", 2000)
	// LISTEN starts on its own connection: send until one arrives.
	deadline := time.Now().Add(10 * time.Second)
	var first [3]string
	for first[0] == "" {
		if time.Now().After(deadline) {
			t.Fatal("no cancellation arrived within 10s")
		}
		if err := a.NotifyCancel(ctx, "agt_1", "job_1", long); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-got:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if want := long[:1024] + "…"; first[0] != "agt_1" || first[1] != "job_1" || first[2] != want {
		t.Fatalf("got agent %q, job %q, a reason of %d bytes; want agt_1, job_1, 1024 bytes and an ellipsis", first[0], first[1], len(first[2]))
	}
	// A revoked agent's stream is to end wherever it is held.
	if err := a.NotifyKick(ctx, "agt_2"); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-kicked:
		if k != "agt_2" {
			t.Fatalf("kicked %q, want agt_2", k)
		}
	case c := <-got:
		t.Fatalf("a kick arrived as a cancellation: %q", c)
	case <-time.After(10 * time.Second):
		t.Fatal("no kick arrived within 10s")
	}
	// A hello on another replica: which process, on which host (a
	// replica's own is not delivered to it).
	if err := b.NotifyHello(ctx, "agt_own", "inst-0", "host-b"); err != nil {
		t.Fatal(err)
	}
	if err := a.NotifyHello(ctx, "agt_3", "inst-1", "host-b"); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h != [3]string{"agt_3", "inst-1", "host-b"} {
			t.Fatalf("hello = %q, want agt_3 inst-1 host-b", h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no hello arrived within 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ListenCancels after its context ended: %v", err)
	}

	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.NotifyCancel(context.Background(), "agt_1", "job_1", "x"); err != nil {
		t.Fatalf("NotifyCancel on SQLite: %v", err)
	}
	if err := s.NotifyKick(context.Background(), "agt_1"); err != nil {
		t.Fatalf("NotifyKick on SQLite: %v", err)
	}
	if err := s.ListenCancels(context.Background(), store.ReplicaNotes{}); err != nil {
		t.Fatalf("ListenCancels on SQLite: %v", err)
	}
}
