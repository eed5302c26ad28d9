package agentproto

import (
	"crypto/ed25519"
	"strconv"
	"time"
)

// listAuditContext separates an audit list call's signature from every
// other signature made with the agent's key.
const listAuditContext = "byoc list audit v1\x00"

// ListAuditMessage is what an agent signs to read its install's audit
// chain at t (agentd audit compare).
func ListAuditMessage(agentID string, t time.Time) []byte {
	return []byte(listAuditContext + agentID + "\x00" + strconv.FormatInt(t.UnixNano(), 10))
}

// SignListAudit signs an audit list call at t.
func SignListAudit(key ed25519.PrivateKey, agentID string, t time.Time) []byte {
	return ed25519.Sign(key, ListAuditMessage(agentID, t))
}

// VerifyListAudit reports whether sig is the agent's signature of an
// audit list call at t.
func VerifyListAudit(pub []byte, agentID string, t time.Time, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(ed25519.PublicKey(pub), ListAuditMessage(agentID, t), sig)
}
