package agentproto

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"time"
)

// updateOfferContext binds an update offer's signature to its purpose:
// no job signature (another context string) can pass for one.
const updateOfferContext = "byoc agent update offer v1\x00"

// UpdateOfferClaims is what imsd signs for an agent release it offers an
// agent (byoc agent update): the install and agent it is for (the
// verifier puts its own ids), the offer's id, the release and when the
// signature expires (signed in Unix milliseconds). Strings are a 4-byte
// big-endian length and their bytes, as in JobClaims.
type UpdateOfferClaims struct {
	KeyID, InstallID, AgentID, OfferID, Release string
	Expires                                     time.Time
}

// Message is the byte string the signature covers.
func (c *UpdateOfferClaims) Message() []byte {
	b := append([]byte(nil), updateOfferContext...)
	for _, s := range []string{c.KeyID, c.InstallID, c.AgentID, c.OfferID, c.Release} {
		b = appendString(b, s)
	}
	return binary.BigEndian.AppendUint64(b, uint64(c.Expires.UnixMilli()))
}

// SignUpdateOffer signs c with imsd's key.
func SignUpdateOffer(key ed25519.PrivateKey, c *UpdateOfferClaims) []byte {
	return ed25519.Sign(key, c.Message())
}

// VerifyUpdateOffer checks sig over c as VerifyJob checks a job's: the
// key must be one the agent trusts, the signature match and not have
// expired at now.
func VerifyUpdateOffer(keys map[string]ed25519.PublicKey, c *UpdateOfferClaims, sig []byte, now time.Time) error {
	if len(sig) == 0 {
		return fmt.Errorf("update offer: %w", ErrUnsigned)
	}
	pub, ok := keys[c.KeyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("update offer: %w %q", ErrUnknownKey, c.KeyID)
	}
	if !ed25519.Verify(pub, c.Message(), sig) {
		return fmt.Errorf("update offer: the signature does not match the offer (tampered with, or not signed by imsd)")
	}
	if now.UnixMilli() > c.Expires.UnixMilli() {
		return fmt.Errorf("update offer: %w: it expired at %s", ErrExpired, c.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}
