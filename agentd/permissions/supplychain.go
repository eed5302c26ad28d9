package permissions

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
)

// Supply-chain policy modes.
const (
	// SupplyChainRefuse refuses a job whose artifact is not signed.
	SupplyChainRefuse = "refuse"
	// SupplyChainWarn logs and audits it, and runs the job.
	SupplyChainWarn = "warn"
)

// SupplyChainPolicy is the customer's supply-chain policy (agentd policy
// supply-chain), kept in permissions.json and so signed like the
// permission modes: imsd cannot change it, and the agent alone enforces
// it, before every plan and apply of an image, helm or terraform
// component.
type SupplyChainPolicy struct {
	// RequireSignature requires every artifact such a job deploys to
	// carry a signature (internal/ocisign) by a trusted key: imsd's keys
	// the agent pinned, and Keys.
	RequireSignature bool `json:"require_signature,omitempty"`
	// Mode is what happens to an artifact without one: refuse (the
	// default) or warn.
	Mode string `json:"mode,omitempty"`
	// Keys are further trusted Ed25519 public keys (base64 of the 32
	// bytes), such as a vendor's own build signing key.
	Keys []string `json:"keys,omitempty"`
}

// Equal reports whether p and o say the same.
func (p SupplyChainPolicy) Equal(o SupplyChainPolicy) bool {
	return p.RequireSignature == o.RequireSignature && p.Mode == o.Mode && slices.Equal(p.Keys, o.Keys)
}

// Warn reports whether an unsigned artifact is only warned about.
func (p SupplyChainPolicy) Warn() bool { return p.Mode == SupplyChainWarn }

// Check checks the mode and the keys.
func (p SupplyChainPolicy) Check() error {
	if p.Mode != "" && p.Mode != SupplyChainRefuse && p.Mode != SupplyChainWarn {
		return fmt.Errorf("mode %q: want refuse or warn", p.Mode)
	}
	_, err := p.PublicKeys()
	return err
}

// PublicKeys parses Keys.
func (p SupplyChainPolicy) PublicKeys() ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for i, k := range p.Keys {
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("keys[%d]: not the base64 of a %d-byte Ed25519 public key", i, ed25519.PublicKeySize)
		}
		out = append(out, ed25519.PublicKey(b))
	}
	return out, nil
}

// String describes the policy in one line.
func (p SupplyChainPolicy) String() string {
	if !p.RequireSignature {
		return "no signature required"
	}
	mode := p.Mode
	if mode == "" {
		mode = SupplyChainRefuse
	}
	keys := "imsd's pinned keys"
	if len(p.Keys) > 0 {
		keys += fmt.Sprintf(" and %d further key(s)", len(p.Keys))
	}
	return fmt.Sprintf("signature required (by %s); otherwise %s", keys, mode)
}

// ParsePublicKey reads an Ed25519 public key from a file's content: a PEM
// "PUBLIC KEY" (PKIX), or the base64 of its 32 bytes. It returns the
// base64 form Keys holds.
func ParsePublicKey(b []byte) (string, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "PUBLIC KEY" {
			return "", fmt.Errorf("a PEM %q block; want PUBLIC KEY (an Ed25519 public key)", blk.Type)
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return "", err
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return "", fmt.Errorf("a %T; want an Ed25519 public key", k)
		}
		return base64.StdEncoding.EncodeToString(pub), nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return "", fmt.Errorf("neither a PEM PUBLIC KEY nor the base64 of a %d-byte Ed25519 public key", ed25519.PublicKeySize)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}
