//go:build linux

package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/internal/proctest"
)

const deathHelperEnv = "BYOC_PGTEST_DEATH_HELPER"

// TestServerDiesWithTheBinaryHelper is the killed test binary of
// TestServerDiesWithTheBinary: it starts a server, prints the pid of
// its connection's backend, and waits to be killed.
func TestServerDiesWithTheBinaryHelper(t *testing.T) {
	if os.Getenv(deathHelperEnv) == "" {
		t.Skip("run by TestServerDiesWithTheBinary")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	fmt.Println(pid)
	select {}
}

// TestServerDiesWithTheBinary: a test binary killed outright (as a
// timeout's panic skips every cleanup) leaves no PostgreSQL behind: its
// postmaster and backends die with it.
func TestServerDiesWithTheBinary(t *testing.T) {
	helper, line := proctest.Helper(t, "TestServerDiesWithTheBinaryHelper", deathHelperEnv)
	backend, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("the helper printed %q", line)
	}
	proctest.KillAndWaitGone(t, helper, 20*time.Second, proctest.PPID(t, backend), backend)
}
