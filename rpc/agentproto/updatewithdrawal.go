package agentproto

import (
	"crypto/ed25519"
	"encoding/binary"
	"time"
)

// updateWithdrawalContext binds a withdrawal's signature to its purpose:
// neither an offer's signature nor a job's can pass for one.
const updateWithdrawalContext = "byoc agent update withdrawal v1\x00"

// UpdateWithdrawalClaims is what imsd signs to take back an update offer
// it made an agent: the install and agent it is for (the verifier puts
// its own ids), the offer's id and when the signature expires (signed in
// Unix milliseconds), encoded as UpdateOfferClaims. A withdrawal of one
// offer, or for another agent, does not verify for another.
type UpdateWithdrawalClaims struct {
	KeyID, InstallID, AgentID, OfferID string
	Expires                            time.Time
}

// Message is the byte string the signature covers.
func (c *UpdateWithdrawalClaims) Message() []byte {
	b := append([]byte(nil), updateWithdrawalContext...)
	for _, s := range []string{c.KeyID, c.InstallID, c.AgentID, c.OfferID} {
		b = appendString(b, s)
	}
	return binary.BigEndian.AppendUint64(b, uint64(c.Expires.UnixMilli()))
}

// SignUpdateWithdrawal signs c with imsd's key.
func SignUpdateWithdrawal(key ed25519.PrivateKey, c *UpdateWithdrawalClaims) []byte {
	return ed25519.Sign(key, c.Message())
}

// VerifyUpdateWithdrawal checks sig over c as VerifyUpdateOffer checks an
// offer's: a key the agent trusts, a matching signature, not expired at
// now.
func VerifyUpdateWithdrawal(keys map[string]ed25519.PublicKey, c *UpdateWithdrawalClaims, sig []byte, now time.Time) error {
	return verifyUpdateSigned("update withdrawal", "the withdrawal (tampered with, for another offer or agent, or not signed by imsd)", keys, c.KeyID, c.Message(), sig, c.Expires, now)
}
