//go:build linux

package fault

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/internal/proctest"
)

// TestPGPairDiesWithTheBinary: a test binary killed outright (as a
// timeout's panic skips every cleanup) leaves none of the failover
// test's PostgreSQL behind: the primary's and the standby's postmasters
// and the primary's walsender die with it.
func TestPGPairDiesWithTheBinary(t *testing.T) {
	skipShort(t)
	pgBin(t)
	proctest.DiesWithTheBinary(t, 20*time.Second, func(t *testing.T) ([]int, []string) {
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
		return []int{postmaster(p.primary), postmaster(p.standby), walsender}, []string{p.dir}
	})
}
