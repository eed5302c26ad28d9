package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// maxSavedPlans is how many plan artifacts a component keeps.
const maxSavedPlans = 8

// planStore keeps a component's plan artifacts: STATE_DIR/.byoc-plans/
// (sdk.PlanDirName), one directory per plan, named by the hex digits of
// its digest. A plan writes into new-<job>-<attempt>/ and the directory
// is renamed once its digest is known. Only a job holding the component's
// state-dir lock touches it, so no two jobs race on it. The zero value
// (no state directory) keeps nothing.
type planStore struct {
	root string
}

// dir is the artifact directory of the plan with digest d, "" when there
// is none to name.
func (p planStore) dir(d string) string {
	h, ok := agentproto.PlanDigestHex(d)
	if p.root == "" || !ok {
		return ""
	}
	return filepath.Join(p.root, h)
}

// fresh creates the empty directory a plan of job saves its artifact in.
func (p planStore) fresh(job Job) (string, error) {
	if err := os.MkdirAll(p.root, 0o700); err != nil {
		return "", err
	}
	d := filepath.Join(p.root, fmt.Sprintf("new-%s-%d", job.ID, job.Attempt))
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.Mkdir(d, 0o700)
}

// keep files a finished plan's directory under its digest, replacing an
// older artifact of the same plan, and drops all but the newest
// maxSavedPlans.
func (p planStore) keep(dir, digest string) error {
	target := p.dir(digest)
	if dir == "" || target == "" {
		return nil
	}
	if err := os.RemoveAll(target); err != nil {
		return err
	}
	if err := os.Rename(dir, target); err != nil {
		return err
	}
	// The rename keeps the directory's time; the newest plan is this one.
	now := time.Now()
	if err := os.Chtimes(target, now, now); err != nil {
		return err
	}
	return p.prune()
}

// adopt files a fresh plan that matched the approved digest: the approved
// plan's own artifact wins when it is still there (it is what was
// approved); otherwise the fresh one takes its place.
func (p planStore) adopt(dir, digest string) error {
	target := p.dir(digest)
	if dir == "" || target == "" {
		return nil
	}
	if _, err := os.Stat(target); err == nil {
		return os.RemoveAll(dir)
	}
	return os.Rename(dir, target)
}

// discard removes a plan's directory that will not be kept.
func (p planStore) discard(dir string) {
	if dir != "" {
		os.RemoveAll(dir) //nolint:errcheck // the next plan or apply clears it
	}
}

// clear removes every saved plan.
func (p planStore) clear() error {
	if p.root == "" {
		return nil
	}
	return os.RemoveAll(p.root)
}

// prune removes leftover new-* directories (a killed job's) and all but
// the newest maxSavedPlans artifacts.
func (p planStore) prune() error {
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return err
	}
	type saved struct {
		name string
		mod  time.Time
	}
	var plans []saved
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "new-") || !e.IsDir() {
			errs = append(errs, os.RemoveAll(filepath.Join(p.root, e.Name())))
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plans = append(plans, saved{e.Name(), info.ModTime()})
	}
	slices.SortFunc(plans, func(a, b saved) int { return b.mod.Compare(a.mod) })
	for _, s := range plans[min(len(plans), maxSavedPlans):] {
		errs = append(errs, os.RemoveAll(filepath.Join(p.root, s.name)))
	}
	return errors.Join(errs...)
}
