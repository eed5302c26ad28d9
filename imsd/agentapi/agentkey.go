package agentapi

// The agent's own key rotation (agentd identity rotate) on imsd's side:
// a hello authenticated by the agent's key may announce its next key
// (Hello.next_key, endorsed by the current key, with the next key's
// proof); imsd records it beside the current key and names it in the
// welcome (next_key_id), on which the agent switches to it. Until then
// either key opens the channel and signs the agent's requests; the
// agent's first hello under the next key makes it the agent's only key,
// and the old key is refused from then on. Both steps are audited in the
// install's chain (agent.key_rotation_started, agent.key_rotated).

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/rpc/agentproto"
	agentv1 "github.com/byoc-dev/byoc/rpc/gen/byoc/agent/v1"
)

// agentKeys are the keys agent a may use: its key, then its next key
// while a rotation is under way.
func agentKeys(a store.Agent) []ed25519.PublicKey {
	keys := []ed25519.PublicKey{a.PublicKey}
	if len(a.NextPublicKey) == ed25519.PublicKeySize {
		keys = append(keys, a.NextPublicKey)
	}
	return keys
}

// verifiesWith reports whether verify accepts one of agent a's keys: a
// request the agent signed (audit, break-glass, registry grants) while a
// rotation is under way may carry either.
func verifiesWith(a store.Agent, verify func(pub ed25519.PublicKey) bool) bool {
	for _, k := range agentKeys(a) {
		if verify(k) {
			return true
		}
	}
	return false
}

// rotateAgentKey runs the rotation steps a verified hello of agent a
// asks for: underNext (the hello used a's next key) makes the next key
// a's key; next (a hello under a's current key announcing its next key)
// records it when its endorsement verifies. It returns the next key's id
// for the welcome ("" when none was recorded), and updates a.
func (s *Service) rotateAgentKey(ctx context.Context, a *store.Agent, underNext bool, next *agentv1.AgentKeyRotation) (string, error) {
	now := s.now()
	if underNext {
		prev, cur := ed25519.PublicKey(a.PublicKey), ed25519.PublicKey(a.NextPublicKey)
		done, err := s.store.PromoteAgentKey(ctx, a.ID, cur, agentproto.KeyID(prev), agentproto.KeyID(cur), now)
		if err != nil {
			return "", err
		}
		if done {
			s.log.InfoContext(ctx, "the agent's key rotated; its previous key is refused from now on", "agent", a.ID, "install", a.InstallID,
				"previous_key_id", agentproto.KeyID(prev), "key_id", agentproto.KeyID(cur))
		}
		a.PublicKey, a.NextPublicKey, a.KeyRotatedAt = cur, nil, now
	}
	if next == nil {
		return "", nil
	}
	// A next key announced under the key the hello used (after a
	// promotion, the agent's new key: a second rotation started before
	// the first completed).
	r := agentproto.AgentKeyRotation{AgentID: a.ID, Current: a.PublicKey, Next: next.PublicKey, Endorsement: next.Endorsement, Proof: next.Proof}
	if !r.Verify() {
		s.log.WarnContext(ctx, "the agent's hello announces a next key whose endorsement does not verify; not recorded", "agent", a.ID, "install", a.InstallID)
		return "", nil
	}
	id := agentproto.KeyID(r.Next)
	if !ed25519.PublicKey(a.NextPublicKey).Equal(r.Next) {
		if err := s.store.SetAgentNextKey(ctx, a.ID, r.Current, r.Next, agentproto.KeyID(r.Current), id, hex.EncodeToString(r.Endorsement), now); err != nil {
			return "", err
		}
		s.log.InfoContext(ctx, "the agent announced its next key", "agent", a.ID, "install", a.InstallID, "key_id", agentproto.KeyID(r.Current), "next_key_id", id)
		a.NextPublicKey = r.Next
	}
	return id, nil
}
