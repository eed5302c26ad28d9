package terraform

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var lockID = regexp.MustCompile(`(?m)^\W*ID:\s+(\S+)`)

// recoverLock removes a state lock that a killed Terraform of this
// component left behind, and reports whether it did (so the command is
// worth another try).
//
// Terraform releases its lock when it is interrupted, and the local
// backend's lock (fcntl) goes with the process; but a Terraform killed
// outright (the agent's cancel grace ran out, a lost lease, a crash)
// leaves a remote backend's lock, and every later run would fail on it.
// The lock is removed only when the running marker, written into the
// component's state dir around every Terraform command and left there
// only by a run that never finished, was there when this run started:
// the agent runs one job of a component at a time (it holds the state
// dir's lock), so that lock is this component's own dead run's, not a
// live one's.
func (r *run) recoverLock(ctx context.Context, err error) bool {
	if !r.staleMarker || ctx.Err() != nil || !strings.Contains(err.Error(), "Error acquiring the state lock") {
		return false
	}
	m := lockID.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	r.staleMarker = false
	r.log.System("terraform: the state is locked by " + m[1] + ", left by a run of this component that was killed; removing the lock")
	if ferr := r.tf.ForceUnlock(ctx, m[1]); ferr != nil {
		r.log.System("terraform: force-unlock " + m[1] + ": " + cleanError(ferr))
		return false
	}
	return true
}

// readMarker notes whether a previous run left the running marker.
func (r *run) readMarker() {
	if r.stateDir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(r.stateDir, runningMarker))
	if err == nil {
		r.staleMarker = true
		r.log.System("terraform: the previous run of this component (job " + strings.TrimSpace(string(b)) + ") did not finish; continuing from the state it left")
	}
}
