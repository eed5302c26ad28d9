// Package release rolls an app revision out to many installs in waves:
// it plans every selected install (grouped by identical plan), then
// starts each wave's installs (an update workflow each, naming the
// release) once the previous wave succeeded and, when asked, once each
// install's maintenance window is open; a failure threshold halts it.
//
// All state is in the store (releases, release_installs): the engine can
// stop at any point and another (after a restart, or on another replica)
// carries on. Every change is a conditional write, so two engines never
// start an install twice, as workflows are advanced.
package release

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/imsd/store"
)

// MaxWaves is how many waves a release may have.
const MaxWaves = 20

// ParseWaves reads a wave spec ("canary:2,10%,50%,100%") for n installs:
// each wave is an optional name and a count of installs ("2") or the
// share of all installs rolled out by its end ("10%", cumulative). The
// waves must end with every install: the last one is usually 100%.
func ParseWaves(spec string, n int) ([]store.ReleaseWave, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		spec = "100%"
	}
	parts := strings.Split(spec, ",")
	if len(parts) > MaxWaves {
		return nil, errs.Field("waves", "at most %d waves, got %d", MaxWaves, len(parts))
	}
	var out []store.ReleaseWave
	done := 0
	for i, p := range parts {
		p = strings.TrimSpace(p)
		name := fmt.Sprintf("wave %d", i+1)
		if k := strings.IndexByte(p, ':'); k >= 0 {
			name, p = strings.TrimSpace(p[:k]), strings.TrimSpace(p[k+1:])
			if name == "" || len(name) > 64 {
				return nil, errs.Field("waves", "wave %d: a name is 1 to 64 characters", i+1)
			}
		}
		size := 0
		if pct, ok := strings.CutSuffix(p, "%"); ok {
			v, err := strconv.ParseFloat(pct, 64)
			if err != nil || v <= 0 || v > 100 || math.IsNaN(v) {
				return nil, errs.Field("waves", "wave %d (%q): a share is more than 0%% and at most 100%%", i+1, p)
			}
			target := int(math.Ceil(v * float64(n) / 100))
			size = max(0, target-done)
		} else {
			v, err := strconv.Atoi(p)
			if err != nil || v < 1 {
				return nil, errs.Field("waves", "wave %d (%q): a wave is a count of installs (2) or a share of them (10%%)", i+1, p)
			}
			size = min(v, n-done)
		}
		done += size
		out = append(out, store.ReleaseWave{Name: name, Spec: p, Size: size})
	}
	if done < n {
		return nil, errs.Field("waves", "the waves %q roll out %d of the %d installs selected: end with 100%%", spec, done, n)
	}
	return out, nil
}

// ParseMaxFailures reads a failure threshold ("5%" of n installs, or a
// count) as the number of failed installs the release tolerates: one
// more halts it. "" is 0.
func ParseMaxFailures(spec string, n int) (int, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return 0, nil
	}
	if pct, ok := strings.CutSuffix(spec, "%"); ok {
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
			return 0, errs.Field("max_failures", "%q: a share is between 0%% and 100%%", spec)
		}
		return int(math.Floor(v * float64(n) / 100)), nil
	}
	v, err := strconv.Atoi(spec)
	if err != nil || v < 0 {
		return 0, errs.Field("max_failures", "%q: a count of installs (3) or a share of them (5%%)", spec)
	}
	return v, nil
}
