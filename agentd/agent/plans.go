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

	"github.com/byoc-dev/byoc/plugins/sdk"
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
//
// The state directory is the vendor's code's to write (the plugin and
// all it starts may replace anything in it, while the agent files a plan
// too), and the agent works in it from outside the sandbox. So every
// file operation goes through state, an os.Root of the directory: a
// symlink planted there (.byoc-plans pointing at the agent's own state
// directory, say) never leads the agent to a file outside it, whatever
// it points at and whenever it appears.
type planStore struct {
	state *os.Root
	// root is the plans' directory's path, as handed to the plugin.
	root string
}

// openPlans opens the plan store of the component state directory
// stateDir; the zero store when stateDir is "".
func openPlans(stateDir string) (planStore, error) {
	if stateDir == "" {
		return planStore{}, nil
	}
	state, err := os.OpenRoot(stateDir)
	if err != nil {
		return planStore{}, err
	}
	return planStore{state: state, root: filepath.Join(stateDir, sdk.PlanDirName)}, nil
}

// close releases the state directory.
func (p planStore) close() {
	if p.state != nil {
		p.state.Close()
	}
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

// name is the path of the plan directory dir (one this store handed
// out: a child of root) within the state directory.
func (p planStore) name(dir string) string {
	return filepath.Join(sdk.PlanDirName, filepath.Base(dir))
}

// fresh creates the empty directory a plan of job saves its artifact in.
// A .byoc-plans that is not a directory (a symlink, a file: the vendor's
// code put it there) is removed first, saying so in note.
func (p planStore) fresh(job Job, note func(string)) (string, error) {
	if fi, err := p.state.Lstat(sdk.PlanDirName); err == nil && !fi.IsDir() {
		if err := p.state.Remove(sdk.PlanDirName); err != nil {
			return "", err
		}
		note(fmt.Sprintf("%s was a %s, not the agent's directory of saved plans: removed (nothing outside the component's state directory is followed)",
			p.root, kindOf(fi.Mode())))
	}
	if err := p.state.Mkdir(sdk.PlanDirName, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	d := filepath.Join(p.root, fmt.Sprintf("new-%s-%d", job.ID, job.Attempt))
	if err := p.state.RemoveAll(p.name(d)); err != nil {
		return "", err
	}
	return d, p.state.Mkdir(p.name(d), 0o700)
}

// kindOf names a file's type for people.
func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	default:
		return "special file"
	}
}

// keep files a finished plan's directory under its digest, replacing an
// older artifact of the same plan, and drops all but the newest
// maxSavedPlans.
func (p planStore) keep(dir, digest string) error {
	target := p.dir(digest)
	if dir == "" || target == "" {
		return nil
	}
	if err := p.state.RemoveAll(p.name(target)); err != nil {
		return err
	}
	if err := p.state.Rename(p.name(dir), p.name(target)); err != nil {
		return err
	}
	// The rename keeps the directory's time; the newest plan is this one.
	now := time.Now()
	if err := p.state.Chtimes(p.name(target), now, now); err != nil {
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
	if _, err := p.state.Stat(p.name(target)); err == nil {
		return p.state.RemoveAll(p.name(dir))
	}
	return p.state.Rename(p.name(dir), p.name(target))
}

// discard removes a plan's directory that will not be kept.
func (p planStore) discard(dir string) {
	if dir != "" {
		p.state.RemoveAll(p.name(dir)) //nolint:errcheck // the next plan or apply clears it
	}
}

// clear removes every saved plan.
func (p planStore) clear() error {
	if p.root == "" {
		return nil
	}
	return p.state.RemoveAll(sdk.PlanDirName)
}

// prune removes leftover new-* directories (a killed job's) and all but
// the newest maxSavedPlans artifacts.
func (p planStore) prune() error {
	d, err := p.state.Open(sdk.PlanDirName)
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
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
		name := filepath.Join(sdk.PlanDirName, e.Name())
		if strings.HasPrefix(e.Name(), "new-") || !e.IsDir() {
			errs = append(errs, p.state.RemoveAll(name))
			continue
		}
		info, err := p.state.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plans = append(plans, saved{name, info.ModTime()})
	}
	slices.SortFunc(plans, func(a, b saved) int { return b.mod.Compare(a.mod) })
	for _, s := range plans[min(len(plans), maxSavedPlans):] {
		errs = append(errs, p.state.RemoveAll(s.name))
	}
	return errors.Join(errs...)
}
