package agentproto

import (
	"crypto/ed25519"
	"encoding/binary"
	"time"
)

// revokeSelfContext separates the customer's revocation of their agent
// (agentd identity revoke) from every other signature of the agent's key.
const revokeSelfContext = "byoc agent self revocation v1\x00"

// RevokeSelfMessage is what the agent signs to revoke itself.
func RevokeSelfMessage(agentID, by, reason string, t time.Time) []byte {
	m := []byte(revokeSelfContext)
	for _, s := range []string{agentID, by, reason} {
		m = binary.BigEndian.AppendUint32(m, uint32(len(s)))
		m = append(m, s...)
	}
	return binary.BigEndian.AppendUint64(m, uint64(t.UnixNano()))
}

// SignRevokeSelf signs the revocation of agentID by the customer's user by.
func SignRevokeSelf(key ed25519.PrivateKey, agentID, by, reason string, t time.Time) []byte {
	return ed25519.Sign(key, RevokeSelfMessage(agentID, by, reason, t))
}

// VerifyRevokeSelf reports whether sig is the agent's signature of the
// revocation.
func VerifyRevokeSelf(pub []byte, agentID, by, reason string, t time.Time, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(pub), RevokeSelfMessage(agentID, by, reason, t), sig)
}
