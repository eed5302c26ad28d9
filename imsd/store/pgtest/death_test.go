//go:build linux

package pgtest_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/internal/proctest"
)

// TestServerDiesWithTheBinary: a test binary killed outright (as a
// timeout's panic skips every cleanup) leaves no PostgreSQL behind: its
// postmaster and backends die with it.
func TestServerDiesWithTheBinary(t *testing.T) {
	proctest.DiesWithTheBinary(t, 20*time.Second, func(t *testing.T) ([]int, []string) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgtest.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		var backend int
		var data string
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('data_directory')").Scan(&backend, &data); err != nil {
			t.Fatal(err)
		}
		// The server's temporary directory holds its data directory.
		return []int{proctest.PPID(t, backend), backend}, []string{filepath.Dir(data)}
	})
}
