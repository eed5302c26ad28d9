package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/imsd/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// opener returns a storetest.OpenFunc for databases that newDSN makes.
func opener(newDSN func(t *testing.T) string) storetest.OpenFunc {
	return func(t *testing.T) (*store.Store, func() *store.Store) {
		dsn := newDSN(t)
		open := func() *store.Store {
			s, err := store.Open(context.Background(), dsn)
			if err != nil {
				t.Fatalf("open %s: %v", dsn, err)
			}
			return s
		}
		s := open()
		t.Cleanup(func() { s.Close() })
		return s, open
	}
}

func TestSQLite(t *testing.T) {
	storetest.Run(t, opener(func(t *testing.T) string {
		return filepath.Join(t.TempDir(), "byoc.db")
	}))
}

func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping PostgreSQL")
	}
	storetest.Run(t, opener(func(t *testing.T) string { return pgtest.Start(t) }))
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{"", ":memory:", "sqlite::memory:"} {
		if s, err := store.Open(ctx, dsn); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", dsn)
		}
	}
	s, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Dialect() != store.DialectSQLite {
		t.Fatalf("Dialect() = %q", s.Dialect())
	}
}

// TestConcurrentWrites runs many writes at once, some failing, some from
// callers that gave up: on SQLite they share group-commit batches, and
// each must get its own answer and leave only its own effect.
func TestConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.CreateApp(ctx, store.App{ID: "app", Name: "app", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateInstall(ctx, store.Install{ID: "inst", AppID: "app", Name: "inst", CreatedAt: t0},
		store.EnrollmentToken{Hash: "h", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	const n = 400
	var wg sync.WaitGroup
	errc := make([]error, n)
	for i := range n {
		wg.Go(func() {
			j := store.Job{ID: fmt.Sprintf("job-%d", i/2), InstallID: "inst", ComponentType: "t", Operation: "apply",
				MaxAttempts: 1, Timeout: time.Minute, CreatedAt: t0}
			c := ctx
			switch i % 10 {
			case 3:
				j.ID, j.InstallID = fmt.Sprintf("bad-%d", i), "nope" // fails: no such install
			case 5:
				j.ID, c = fmt.Sprintf("gave-up-%d", i), cancelled
			}
			errc[i] = s.EnqueueJob(c, j)
		})
	}
	wg.Wait()
	for i := 0; i < n; i += 2 {
		// Jobs 2k and 2k+1 share an ID: exactly one of them is stored,
		// unless 2k+1 was refused for its own reason.
		id := fmt.Sprintf("job-%d", i/2)
		_, getErr := s.GetJob(ctx, id)
		a, b := errc[i], errc[i+1]
		for _, other := range []string{"bad", "gave-up"} {
			if _, err := s.GetJob(ctx, fmt.Sprintf("%s-%d", other, i+1)); errs.CodeOf(err) != errs.NotFound {
				t.Fatalf("%s-%d stored: %v", other, i+1, err)
			}
		}
		switch {
		case i%10 == 2: // i+1 has a bad install
			if a != nil || getErr != nil || errs.CodeOf(b) != errs.NotFound {
				t.Fatalf("%s: %v / %v / get %v", id, a, b, getErr)
			}
		case i%10 == 4: // i+1 gave up
			if a != nil || getErr != nil || !errors.Is(b, context.Canceled) {
				t.Fatalf("%s: %v / %v / get %v", id, a, b, getErr)
			}
		default:
			if (a == nil) == (b == nil) || getErr != nil {
				t.Fatalf("%s: %v / %v / get %v", id, a, b, getErr)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.EnqueueJob(ctx, store.Job{ID: "late", InstallID: "inst", ComponentType: "t", Operation: "apply",
		MaxAttempts: 1, Timeout: time.Minute, CreatedAt: t0}); err == nil {
		t.Fatal("write after Close succeeded")
	}
}
