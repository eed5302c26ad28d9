// Package agentproto holds the hand-written parts of the agent protocol
// (byoc/agent/v1) that both imsd and agentd must agree on byte for byte:
// the challenge signature an agent answers with, and the {{ .secrets.NAME }}
// references a job's config carries to the agent, which fills them in.
//
// It imports only the standard library, so the agent links neither imsd's
// packages nor the app config format (and its TOML parser) to speak the
// protocol.
package agentproto

import (
	"crypto/ed25519"
	"fmt"
	"regexp"
)

// challengeContext binds a signature to its purpose, so that a signature
// over a nonce can never be reused for anything else.
const challengeContext = "byoc agent connect v1\x00"

// SignChallenge signs a Connect challenge nonce with the agent's key.
func SignChallenge(key ed25519.PrivateKey, agentID string, nonce []byte) []byte {
	return ed25519.Sign(key, challengeMessage(agentID, nonce))
}

// VerifyChallenge reports whether sig is the agent's signature of nonce.
func VerifyChallenge(pub []byte, agentID string, nonce, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	return ed25519.Verify(ed25519.PublicKey(pub), challengeMessage(agentID, nonce), sig)
}

func challengeMessage(agentID string, nonce []byte) []byte {
	m := make([]byte, 0, len(challengeContext)+len(agentID)+1+len(nonce))
	m = append(m, challengeContext...)
	m = append(m, agentID...)
	m = append(m, 0)
	return append(m, nonce...)
}

// SecretRef is how a {{ .secrets.NAME }} reference stays in a config that
// imsd renders: imsd never knows secret values; the agent replaces it.
func SecretRef(name string) string { return "{{ .secrets." + name + " }}" }

// secretRefRE matches SecretRef's output and the spellings a config may use
// ({{.secrets.X}}, {{- .secrets.X -}}); its first group is the name.
var secretRefRE = regexp.MustCompile(`\{\{-?\s*\.secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}`)

// InputRef is how a reference to a customer-provided input stays in a
// config that imsd renders: the customer sets the value in the install
// stack, which only the agent reads; the agent replaces it.
func InputRef(name string) string { return "{{ .inputs." + name + " }}" }

// inputRefRE matches InputRef's output and the spellings a config may use.
var inputRefRE = regexp.MustCompile(`\{\{-?\s*\.inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}`)

// ReplaceInputs replaces every {{ .inputs.NAME }} in s for which lookup
// knows NAME; ok(NAME) false leaves a reference alone (imsd rendered
// the other inputs already, so none should be left), and a name ok says
// is the agent's but lookup does not know is an error naming it.
func ReplaceInputs(s string, lookup func(string) (string, bool), ours func(string) bool) (string, error) {
	var missing []string
	out := inputRefRE.ReplaceAllStringFunc(s, func(m string) string {
		name := inputRefRE.FindStringSubmatch(m)[1]
		if !ours(name) {
			return m
		}
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("customer input %q is not set", missing[0])
	}
	return out, nil
}

// InputNames returns the names of the {{ .inputs.NAME }} references in s.
func InputNames(s string) []string {
	var out []string
	for _, m := range inputRefRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// ReplaceSecrets replaces every {{ .secrets.NAME }} in s with lookup(NAME).
// It is what the agent does with a rendered config; a name lookup does
// not know is an error naming the first such secret.
func ReplaceSecrets(s string, lookup func(string) (string, bool)) (string, error) {
	var missing []string
	out := secretRefRE.ReplaceAllStringFunc(s, func(m string) string {
		name := secretRefRE.FindStringSubmatch(m)[1]
		v, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("secret %q is not defined", missing[0])
	}
	return out, nil
}
