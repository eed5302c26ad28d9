package agent

// The agent's own key rotation (agentd identity rotate; identity.Rotation,
// permissions.CommitRotation). The customer's command writes the next key
// to the state dir; the agent notices it (at start, and at each look at
// the control files while it runs), reconnects and announces it in its
// hello, authenticated by its current key. Once imsd's welcome names the
// next key as recorded, the agent re-signs the customer's control files
// with it, saves identity.json with it, and reconnects under it; imsd
// then refuses the old key. Jobs keep running across both reconnects, as
// across any. If imsd cannot be reached the rotation waits; meanwhile
// both keys check the control files.

import (
	"cmp"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/byoc-dev/byoc/agentd/identity"
	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// Journal record kinds of the agent's key rotation; subject "agent:ID".
const (
	// KindKeyRotationPending: the agent took up a rotation (data
	// key_id, next_key_id, started_by).
	KindKeyRotationPending = "identity.rotation_pending"
	// KindKeyRotated: the agent's key is the next key now (data
	// previous_key_id, key_id, resigned: the control files re-signed).
	KindKeyRotated = "identity.rotated"
)

// errReconnect ends a session to open the next at once: a rotation of the
// agent's key moved a step.
var errReconnect = errors.New("reconnecting for the rotation of the agent's key")

// privateKey is the agent's key now.
func (a *Agent) privateKey() ed25519.PrivateKey {
	a.keyMu.Lock()
	defer a.keyMu.Unlock()
	return a.self.PrivateKey
}

// rotation is the rotation under way, nil for none.
func (a *Agent) rotation() *identity.Rotation {
	a.keyMu.Lock()
	defer a.keyMu.Unlock()
	return a.rot
}

// takeRotation looks at the state dir for a rotation under way, taking it
// up if it is new; it reports whether it did. A rotation file the agent's
// key did not endorse is logged and left unused; one holding the agent's
// key already (a rotation committed before a crash) is removed.
func (a *Agent) takeRotation() bool {
	if _, err := os.Stat(filepath.Join(a.cfg.StateDir, identity.RotationFileName)); err != nil {
		return false
	}
	a.keyMu.Lock()
	self, had := a.self, a.rot
	a.keyMu.Unlock()
	r, err := identity.PendingRotation(a.cfg.StateDir, self)
	switch {
	case err != nil:
		if a.rotErr == nil || a.rotErr.Error() != err.Error() {
			a.log.Error("refusing the rotation file in the state dir; the agent keeps its key", "err", err)
		}
		a.rotErr = err
		return false
	case r == nil:
		if err := identity.DropRotation(a.cfg.StateDir); err != nil {
			a.log.Warn("cannot remove the finished rotation's file", "err", err)
		}
		return false
	case had != nil && had.PrivateKey.Equal(r.PrivateKey):
		return false
	}
	a.rotErr = nil
	a.keyMu.Lock()
	a.rot = r
	a.keyMu.Unlock()
	a.log.Info("rotating the agent's key: announcing the next key to imsd", "key_id", identity.KeyIDOf(self.PrivateKey), "next_key_id", agentproto.KeyID(r.Public()))
	a.note(KindKeyRotationPending, "agent:"+a.id.AgentID, map[string]string{"key_id": identity.KeyIDOf(self.PrivateKey),
		"next_key_id": agentproto.KeyID(r.Public()), "started_by": r.StartedBy})
	return true
}

// scheduleRotation starts a rotation (as agentd identity rotate does) once
// the agent's key is Config.RotateKeyEvery old and none is under way.
func (a *Agent) scheduleRotation() {
	if a.cfg.RotateKeyEvery <= 0 || a.rotation() != nil {
		return
	}
	a.keyMu.Lock()
	since := cmp.Or(a.self.KeyRotatedAt, a.self.KeyCreatedAt)
	a.keyMu.Unlock()
	if since.IsZero() {
		since = a.startedAt
	}
	if a.now().Sub(since) < a.cfg.RotateKeyEvery {
		return
	}
	if _, err := identity.BeginRotation(a.cfg.StateDir, a.now(), "agentd --rotate-key-every"); err != nil && !errors.Is(err, identity.ErrRotationPending) {
		a.log.Error("cannot start the scheduled rotation of the agent's key", "err", err)
	}
}

// nextKeyHello is what the hello says of the rotation under way.
func (a *Agent) nextKeyHello() *agentv1.AgentKeyRotation {
	a.keyMu.Lock()
	defer a.keyMu.Unlock()
	if a.rot == nil {
		return nil
	}
	st := a.rot.Statement(a.self)
	return &agentv1.AgentKeyRotation{PublicKey: st.Next, Endorsement: st.Endorsement, Proof: st.Proof}
}

// commitRotation completes the rotation r once imsd recorded its key
// (welcome's next_key_id is recorded): control files re-signed,
// identity.json saved, the key in memory replaced. It runs on the
// session's goroutine, as learnKeys does (both save identity.json).
func (a *Agent) commitRotation(r *identity.Rotation, recorded string) error {
	want := agentproto.KeyID(r.Public())
	if recorded != want {
		if recorded == "" {
			a.log.Warn("imsd did not record the agent's next key (an imsd without agent key rotation, or the endorsement did not verify there); the rotation waits", "next_key_id", want)
		} else {
			a.log.Warn("imsd recorded another next key; the rotation waits", "next_key_id", want, "recorded", recorded)
		}
		return nil
	}
	a.keyMu.Lock()
	self := a.self
	a.keyMu.Unlock()
	self.IMSDKeys, self.RetiredIMSDKeys = a.trustedKeys()
	next, resigned, err := permissions.CommitRotation(a.cfg.StateDir, self, *r, a.now())
	if err != nil {
		a.log.Error("cannot complete the rotation of the agent's key; keeping the current key, trying again at the next connection", "err", err)
		return nil
	}
	a.keyMu.Lock()
	a.self, a.rot = next, nil
	a.keyMu.Unlock()
	prev := identity.KeyIDOf(self.PrivateKey)
	a.log.Info("the agent's key rotated; reconnecting under the new key", "previous_key_id", prev, "key_id", want, "resigned", resigned)
	a.note(KindKeyRotated, "agent:"+a.id.AgentID, map[string]string{"previous_key_id": prev, "key_id": want, "resigned": strings.Join(resigned, ",")})
	return errReconnect
}

// kickRotation asks the session to reconnect for a rotation.
func (a *Agent) kickRotation() {
	select {
	case a.rotKick <- struct{}{}:
	default:
	}
}
