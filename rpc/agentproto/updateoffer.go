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
	return verifyUpdateSigned("update offer", "the offer (tampered with, or not signed by imsd)", keys, c.KeyID, c.Message(), sig, c.Expires, now)
}

// verifyUpdateSigned is VerifyUpdateOffer's and VerifyUpdateWithdrawal's
// check of msg's signature: what names the message in errors, mismatch
// ends the error of a signature that does not match.
func verifyUpdateSigned(what, mismatch string, keys map[string]ed25519.PublicKey, keyID string, msg, sig []byte, expires, now time.Time) error {
	if len(sig) == 0 {
		return fmt.Errorf("%s: %w", what, ErrUnsigned)
	}
	pub, ok := keys[keyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%s: %w %q", what, ErrUnknownKey, keyID)
	}
	if !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("%s: the signature does not match %s", what, mismatch)
	}
	if now.UnixMilli() > expires.UnixMilli() {
		return fmt.Errorf("%s: %w: it expired at %s", what, ErrExpired, expires.UTC().Format(time.RFC3339))
	}
	return nil
}
