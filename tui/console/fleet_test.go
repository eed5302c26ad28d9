package console

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	imsv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/ims/v1"
)

// TestFleetChangesKeepOrder: after any mix of updates (rows that stay
// where they sort, rows that move, rows that enter or leave the filter,
// new and removed installs), under every sort key and direction, the
// fleet's rows are exactly what sorting and filtering it afresh gives.
func TestFleetChangesKeepOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	agents := []string{"online", "offline", "none"}
	apps := []string{"shop", "billing", "search"}
	mk := func(i int) *imsv1.InstallStatus {
		return status(fmt.Sprintf("install-%03d", i), apps[rng.IntN(3)], agents[rng.IntN(3)],
			time.Duration(rng.IntN(600))*time.Second, int32(rng.IntN(3)), int32(rng.IntN(3)), nil)
	}
	for key := range sortKeys {
		for _, reverse := range []bool{false, true} {
			for _, filter := range []string{"", "shop", "app=billing"} {
				f := newFleet()
				f.sortBy, f.reverse, f.filter = key, reverse, filter
				snap := &imsv1.WatchInstallsResponse{Snapshot: true}
				for i := range 200 {
					snap.Installs = append(snap.Installs, mk(i))
				}
				f.apply([]*imsv1.WatchInstallsResponse{snap})
				for range 2000 {
					var r imsv1.WatchInstallsResponse
					switch n := rng.IntN(300); {
					case rng.IntN(20) == 0:
						r.RemovedInstallIds = []string{fmt.Sprintf("ins_install-%03d", n)}
					default:
						r.Installs = []*imsv1.InstallStatus{mk(n)}
					}
					f.apply([]*imsv1.WatchInstallsResponse{&r})
				}
				sorted, visible := slices.Clone(f.sorted), slices.Clone(f.visible)
				f.resort()
				if !slices.Equal(sorted, f.sorted) || !slices.Equal(visible, f.visible) {
					t.Fatalf("sort %s reverse %v filter %q: the rows after the changes differ from a fresh sort (%d/%d rows, %d/%d visible)",
						sortKeys[key], reverse, filter, len(sorted), len(f.sorted), len(visible), len(f.visible))
				}
			}
		}
	}
}
