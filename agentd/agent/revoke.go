package agent

import (
	"context"
	"os"
	"path/filepath"

	"github.com/byoc-dev/byoc/agentd/identity"
)

// The customer's revocation of their agent (agentd identity revoke;
// identity.Revoke): a running agent notices identity.RevokedFileName at
// its next look at the state dir (every PermissionsPoll), stops every job
// and Run returns, saying so. It never starts on this state dir again
// (identity.Load refuses it).

// watchRevoked ends Run (stop, with the revocation as its cause) once
// the customer revoked the agent; it reports whether they did.
func (a *Agent) watchRevoked(stop context.CancelCauseFunc) bool {
	if _, err := os.Stat(filepath.Join(a.cfg.StateDir, identity.RevokedFileName)); err != nil {
		return false
	}
	r, err := identity.Revoked(a.cfg.StateDir)
	if err != nil || r == nil {
		r = &identity.Revocation{Reason: "(unreadable)"}
	}
	stop(identity.RevokedError(a.cfg.StateDir, r))
	return true
}
