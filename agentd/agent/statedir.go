package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// componentName is what the agent accepts as a component's name in an
// assignment: the app config's names (lower case letters, digits, _) and a
// little more, but never anything that leaves StateRoot.
var componentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// plainID is what the agent accepts as a job's id: imsd's ids (job_ and
// lower-case base32) and a little more, but never a path. The id names
// the job's workspace (removed before and after the run), the local copy
// of its log and its saved plan's directory: "../../x" would have the
// agent remove, create and hand to the plugin a directory outside its
// own, and a control character would reach the customer's terminal
// (agentd egress list).
// The same holds for an update offer's id (checkOfferID).
var plainID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// checkJobID says why id cannot be a job's id, or nil.
func checkJobID(id string) error {
	if !plainID.MatchString(id) {
		return fmt.Errorf("job id %q is not an id (want at most 128 letters, digits, _, . and -, starting with a letter or digit)", id)
	}
	return nil
}

// stateLockWait bounds the interval between two tries for a component's
// state lock held by another job.
const stateLockWait = time.Second

// componentState is a component's state directory held by one job.
type componentState struct {
	dir  string
	lock *os.File
}

// release drops the lock. The directory stays.
func (s *componentState) release() {
	if s != nil && s.lock != nil {
		s.lock.Close()
	}
}

// acquireState returns component's state directory under StateRoot,
// created if missing (0700), and locked for this job: the lock is an
// flock on STATE_ROOT/.<component>.lock, beside the directory so that a
// plugin emptying its directory cannot drop it. A job of the same
// component holding it (on this agent or another agentd on the same
// state dir) makes this one wait, saying so once in the job's log, until
// it is free or ctx ends. The lock file names the job holding it.
func (r *PluginRunner) acquireState(ctx context.Context, job Job, log func(int32, string)) (*componentState, error) {
	if !componentName.MatchString(job.Component) {
		return nil, fmt.Errorf("component name %q from the assignment cannot name a state directory (want letters, digits, _ and -)", job.Component)
	}
	if err := os.MkdirAll(r.StateRoot, 0o700); err != nil {
		return nil, fmt.Errorf("component state: %w", err)
	}
	dir := filepath.Join(r.StateRoot, job.Component)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("component state: %w", err)
	}
	path := filepath.Join(r.StateRoot, "."+job.Component+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("component state: %w", err)
	}
	wait := 10 * time.Millisecond
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("component state: lock %s: %w", path, err)
		}
		if !said {
			holder, _ := os.ReadFile(path)
			log(StreamSystem, fmt.Sprintf("[agentd] waiting for component %s's state directory %s: another job of the component holds it (%s)",
				job.Component, dir, strings.TrimSpace(string(holder))))
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("component state: gave up waiting for %s, held by another job of component %s: %w", dir, job.Component, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, stateLockWait)
	}
	// Best effort: who holds it, for the next job's wait message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("job %s attempt %d, agent pid %d\n", job.ID, job.Attempt, os.Getpid())), 0)
	}
	return &componentState{dir: dir, lock: f}, nil
}
