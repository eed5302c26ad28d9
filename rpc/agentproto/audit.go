package agentproto

import (
	"crypto/ed25519"
	"encoding/binary"
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

// checkpointContext separates an audit checkpoint's signature from every
// other signature made with imsd's key.
const checkpointContext = "byoc audit checkpoint v1\x00"

// AuditCheckpointMessage is what imsd signs to vouch for chain's record
// seq, whose hash is hash: by the chain's links, for every record up to
// it. Strings are a 4-byte big-endian length and their bytes, seq 8
// bytes big-endian.
func AuditCheckpointMessage(chain string, seq int64, hash string) []byte {
	b := []byte(checkpointContext)
	b = appendString(b, chain)
	b = binary.BigEndian.AppendUint64(b, uint64(seq))
	return appendString(b, hash)
}

// SignAuditCheckpoint signs a checkpoint with imsd's key.
func SignAuditCheckpoint(key ed25519.PrivateKey, chain string, seq int64, hash string) []byte {
	return ed25519.Sign(key, AuditCheckpointMessage(chain, seq, hash))
}

// VerifyAuditCheckpoint reports whether sig is a checkpoint of chain's
// record seq with hash by the key keyID names among keys.
func VerifyAuditCheckpoint(keys map[string]ed25519.PublicKey, keyID, chain string, seq int64, hash string, sig []byte) bool {
	pub, ok := keys[keyID]
	return ok && len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, AuditCheckpointMessage(chain, seq, hash), sig)
}
