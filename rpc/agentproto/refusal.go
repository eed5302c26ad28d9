package agentproto

import (
	"crypto/ed25519"
	"encoding/base64"
)

// A refused hello. imsd ends the stream of an agent id it does not know
// (never enrolled, or removed) with unauthenticated, and the agent then
// stops for good: retrying cannot fix its identity. That answer comes
// before any channel exists, so imsd signs it, over the stream's
// challenge nonce and the agent id, and the agent stops only on a
// refusal signed by imsd's key for its own stream and id; an unsigned one
// (forged on the path) is logged and the agent connects again.

// HelloRefusalHeader is the end-of-stream metadata key that carries the
// signature, base64.
const HelloRefusalHeader = "Byoc-Hello-Refusal"

const helloRefusalContext = "byoc hello refused v1\x00"

// HelloRefusalMessage is what imsd signs to refuse agentID on the stream
// whose challenge was nonce.
func HelloRefusalMessage(nonce []byte, agentID string) []byte {
	b := []byte(helloRefusalContext)
	b = appendString(b, string(nonce))
	return appendString(b, agentID)
}

// SignHelloRefusal returns the header value refusing agentID.
func SignHelloRefusal(key ed25519.PrivateKey, nonce []byte, agentID string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, HelloRefusalMessage(nonce, agentID)))
}

// VerifyHelloRefusal reports whether header is imsd's (pub's) refusal of
// agentID on the stream whose challenge was nonce.
func VerifyHelloRefusal(pub ed25519.PublicKey, nonce []byte, agentID, header string) bool {
	sig, err := base64.StdEncoding.DecodeString(header)
	return err == nil && len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, HelloRefusalMessage(nonce, agentID), sig)
}
