package store_test

import (
	"context"
	"path/filepath"
	"testing"

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
