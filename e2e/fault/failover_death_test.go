//go:build linux

package fault

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/internal/proctest"
)

const pgPairDeathHelperEnv = "BYOC_FAULT_PGPAIR_DEATH_HELPER"

// TestPGPairDiesWithTheBinaryHelper is the killed test binary of
// TestPGPairDiesWithTheBinary: it starts the failover test's primary and
// standby, prints their postmasters' pids, the primary's walsender's and
// the pair's directory, and waits to be killed.
func TestPGPairDiesWithTheBinaryHelper(t *testing.T) {
	if os.Getenv(pgPairDeathHelperEnv) == "" {
		t.Skip("run by TestPGPairDiesWithTheBinary")
	}
	p := startPGPair(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, p.url(p.primPort, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var walsender int
	if err := c.QueryRow(ctx, "SELECT pid FROM pg_stat_replication").Scan(&walsender); err != nil {
		t.Fatal(err)
	}
	fmt.Println(postmaster(p.primary), postmaster(p.standby), walsender, p.dir)
	select {}
}

// TestPGPairDiesWithTheBinary: a test binary killed outright (as a
// timeout's panic skips every cleanup) leaves none of the failover
// test's PostgreSQL behind: both postmasters and their backends die
// with it.
func TestPGPairDiesWithTheBinary(t *testing.T) {
	skipShort(t)
	pgBin(t)
	helper, line := proctest.Helper(t, "TestPGPairDiesWithTheBinaryHelper", pgPairDeathHelperEnv)
	f := strings.Fields(line)
	if len(f) != 4 {
		t.Fatalf("the helper printed %q", line)
	}
	var pids []int
	for _, s := range f[:3] {
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			t.Fatalf("the helper printed %q", line)
		}
		pids = append(pids, pid)
	}
	t.Cleanup(func() { os.RemoveAll(f[3]) })
	proctest.KillAndWaitGone(t, helper, 20*time.Second, pids...)
}
