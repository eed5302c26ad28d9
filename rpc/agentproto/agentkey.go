package agentproto

import (
	"crypto/ed25519"
	"encoding/binary"
)

// The agent's own key rotation (agentd identity rotate), the agent-side
// mirror of imsd's key chain: the agent's current key endorses its next
// key, and the next key signs the same statement (proof that the agent
// holds it). The agent sends both in its hello (Hello.next_key), inside
// the channel its current key authenticates; imsd records the next key
// beside the current one and accepts either until the agent's first hello
// under the next key, after which it refuses the old one for good.

// agentKeyContext binds an endorsement of an agent's next key to its
// purpose; proofContext binds the next key's own signature.
const (
	agentKeyContext = "byoc agent key endorsement v1\x00"
	agentKeyProof   = "byoc agent key possession v1\x00"
)

func agentKeyMessage(ctx, agentID string, cur, next ed25519.PublicKey) []byte {
	m := make([]byte, 0, len(ctx)+4+len(agentID)+len(cur)+len(next))
	m = append(m, ctx...)
	m = binary.BigEndian.AppendUint32(m, uint32(len(agentID)))
	m = append(m, agentID...)
	m = append(m, cur...)
	return append(m, next...)
}

// AgentKeyRotation is an agent's statement that its key cur is replaced by
// next: Endorsement is cur's signature, Proof next's.
type AgentKeyRotation struct {
	AgentID     string
	Current     ed25519.PublicKey
	Next        ed25519.PublicKey
	Endorsement []byte
	Proof       []byte
}

// RotateAgentKey signs the rotation of agent agentID's key cur to next.
func RotateAgentKey(agentID string, cur, next ed25519.PrivateKey) AgentKeyRotation {
	cp, np := cur.Public().(ed25519.PublicKey), next.Public().(ed25519.PublicKey)
	return AgentKeyRotation{AgentID: agentID, Current: cp, Next: np,
		Endorsement: ed25519.Sign(cur, agentKeyMessage(agentKeyContext, agentID, cp, np)),
		Proof:       ed25519.Sign(next, agentKeyMessage(agentKeyProof, agentID, cp, np))}
}

// Verify reports whether both signatures verify and the keys differ.
func (r AgentKeyRotation) Verify() bool {
	return len(r.Current) == ed25519.PublicKeySize && len(r.Next) == ed25519.PublicKeySize && !r.Current.Equal(r.Next) &&
		ed25519.Verify(r.Current, agentKeyMessage(agentKeyContext, r.AgentID, r.Current, r.Next), r.Endorsement) &&
		ed25519.Verify(r.Next, agentKeyMessage(agentKeyProof, r.AgentID, r.Current, r.Next), r.Proof)
}
