package agentproto

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
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
	if len(sig) == 0 {
		return fmt.Errorf("update withdrawal: %w", ErrUnsigned)
	}
	pub, ok := keys[c.KeyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("update withdrawal: %w %q", ErrUnknownKey, c.KeyID)
	}
	if !ed25519.Verify(pub, c.Message(), sig) {
		return fmt.Errorf("update withdrawal: the signature does not match the withdrawal (tampered with, for another offer or agent, or not signed by imsd)")
	}
	if now.UnixMilli() > c.Expires.UnixMilli() {
		return fmt.Errorf("update withdrawal: %w: it expired at %s", ErrExpired, c.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}
