package permissions

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/byoc-dev/byoc/internal/attest"
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
	// the agent pinned, and Keys; or a keyless signature
	// (internal/ocisign/ocikeyless) by one of Identities under
	// TrustedRoot.
	RequireSignature bool `json:"require_signature,omitempty"`
	// Mode is what happens to an artifact without one: refuse (the
	// default) or warn.
	Mode string `json:"mode,omitempty"`
	// Keys are further trusted Ed25519 public keys (base64 of the 32
	// bytes), such as a vendor's own build signing key.
	Keys []string `json:"keys,omitempty"`
	// NoIMSDKeys trusts Keys and Identities only, not imsd's keys: what
	// imsd's key signed (so what anyone holding imsd, its keys included,
	// signs) passes no rule.
	NoIMSDKeys bool `json:"no_imsd_keys,omitempty"`
	// RequireAttestations are attestations every such artifact must
	// carry, signed by a trusted key (internal/attest): "slsa-provenance"
	// (optionally "slsa-provenance:level>=N", the SLSA Build level) or
	// "sbom".
	RequireAttestations []string `json:"require_attestations,omitempty"`
	// DenyVulnerabilities is a severity (low, medium, high, critical):
	// an artifact whose attached vulnerability scan (cosign's vuln
	// predicate, signed by a trusted key) lists one at or above it is
	// refused, and so is one with no scan.
	DenyVulnerabilities string `json:"deny_vulnerabilities,omitempty"`
	// WarnOn are rules only warned about in mode refuse: a rule name
	// (require-signature, require-attestation, deny-vulnerabilities),
	// or one attestation rule ("require-attestation sbom").
	WarnOn []string `json:"warn_on,omitempty"`
	// Identities are keyless signers trusted beside the keys, each
	// "issuer=URL,subject=REGEX" (internal/attest.ParseIdentity): a
	// signature or an attestation signed keylessly counts when its
	// certificate names one of them and verifies under TrustedRoot.
	Identities []string `json:"identities,omitempty"`
	// TrustedRoot is the customer's Sigstore trusted root (the contents
	// of their trusted_root.json, kept here so that it is signed with the
	// policy): the certificate and timestamp authorities keyless
	// signatures are verified against. Required with Identities.
	TrustedRoot json.RawMessage `json:"trusted_root,omitempty"`
}

// KeylessTrust parses Identities and TrustedRoot; no identities: nil,
// nil.
func (p SupplyChainPolicy) KeylessTrust() ([]attest.Identity, *root.TrustedRoot, error) {
	if len(p.Identities) == 0 {
		return nil, nil, nil
	}
	var ids []attest.Identity
	for _, s := range p.Identities {
		id, err := attest.ParseIdentity(s)
		if err != nil {
			return nil, nil, fmt.Errorf("identity %w", err)
		}
		ids = append(ids, id)
	}
	if len(p.TrustedRoot) == 0 {
		return nil, nil, errors.New("identity: keyless identities need a trusted root (--trusted-root FILE)")
	}
	tr, err := attest.ParseTrustedRoot(p.TrustedRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("trusted-root: %w", err)
	}
	return ids, tr, nil
}

// Rule names.
const (
	RuleRequireSignature    = "require-signature"
	RuleRequireAttestation  = "require-attestation"
	RuleDenyVulnerabilities = "deny-vulnerabilities"
)

// WarnsOn reports whether a failed rule (such as "require-attestation
// sbom") is only warned about: in mode warn every one is, in mode refuse
// those WarnOn names, by rule name or in full.
func (p SupplyChainPolicy) WarnsOn(rule string) bool {
	if p.Warn() {
		return true
	}
	name, _, _ := strings.Cut(rule, " ")
	return slices.Contains(p.WarnOn, rule) || slices.Contains(p.WarnOn, name)
}

// Attestation rules.
const (
	AttestSLSAProvenance = "slsa-provenance"
	AttestSBOM           = "sbom"
)

// Severities a vulnerability rule names, least first.
var Severities = []string{"low", "medium", "high", "critical"}

// AttestationRule is one parsed RequireAttestations entry.
type AttestationRule struct {
	// Kind is AttestSLSAProvenance or AttestSBOM.
	Kind string
	// MinLevel is the least SLSA Build level (provenance); 0: any.
	MinLevel int
}

// ParseAttestationRule reads "slsa-provenance", "slsa-provenance:level>=N"
// (N 1 to 4) or "sbom".
func ParseAttestationRule(s string) (AttestationRule, error) {
	kind, cond, hasCond := strings.Cut(s, ":")
	switch kind {
	case AttestSBOM:
		if hasCond {
			return AttestationRule{}, fmt.Errorf("%q: sbom takes no condition", s)
		}
		return AttestationRule{Kind: kind}, nil
	case AttestSLSAProvenance:
		if !hasCond {
			return AttestationRule{Kind: kind}, nil
		}
		n, ok := strings.CutPrefix(cond, "level>=")
		lvl, err := strconv.Atoi(n)
		if !ok || err != nil || lvl < 1 || lvl > 4 {
			return AttestationRule{}, fmt.Errorf("%q: the condition must be level>=N, N from 1 to 4", s)
		}
		return AttestationRule{Kind: kind, MinLevel: lvl}, nil
	}
	return AttestationRule{}, fmt.Errorf("%q: want slsa-provenance, slsa-provenance:level>=N or sbom", s)
}

// Active reports whether the policy asks anything of an artifact.
func (p SupplyChainPolicy) Active() bool {
	return p.RequireSignature || len(p.RequireAttestations) > 0 || p.DenyVulnerabilities != ""
}

// Equal reports whether p and o say the same.
func (p SupplyChainPolicy) Equal(o SupplyChainPolicy) bool {
	return p.RequireSignature == o.RequireSignature && p.Mode == o.Mode && slices.Equal(p.Keys, o.Keys) &&
		slices.Equal(p.RequireAttestations, o.RequireAttestations) && p.DenyVulnerabilities == o.DenyVulnerabilities &&
		slices.Equal(p.WarnOn, o.WarnOn) && slices.Equal(p.Identities, o.Identities) && bytes.Equal(p.TrustedRoot, o.TrustedRoot)
}

// Warn reports whether an unsigned artifact is only warned about.
func (p SupplyChainPolicy) Warn() bool { return p.Mode == SupplyChainWarn }

// Check checks the mode and the keys.
func (p SupplyChainPolicy) Check() error {
	if p.Mode != "" && p.Mode != SupplyChainRefuse && p.Mode != SupplyChainWarn {
		return fmt.Errorf("mode %q: want refuse or warn", p.Mode)
	}
	for _, r := range p.RequireAttestations {
		if _, err := ParseAttestationRule(r); err != nil {
			return fmt.Errorf("require-attestation %w", err)
		}
	}
	for _, w := range p.WarnOn {
		name, arg, _ := strings.Cut(w, " ")
		switch {
		case name == RuleRequireSignature && arg == "", name == RuleDenyVulnerabilities && arg == "":
		case name == RuleRequireAttestation && arg == "":
		case name == RuleRequireAttestation:
			if _, err := ParseAttestationRule(arg); err != nil {
				return fmt.Errorf("warn-on %w", err)
			}
		default:
			return fmt.Errorf("warn-on %q: want require-signature, require-attestation[ RULE] or deny-vulnerabilities", w)
		}
	}
	if p.DenyVulnerabilities != "" && !slices.Contains(Severities, p.DenyVulnerabilities) {
		return fmt.Errorf("deny-vulnerabilities %q: want one of %s", p.DenyVulnerabilities, strings.Join(Severities, ", "))
	}
	if _, _, err := p.KeylessTrust(); err != nil {
		return err
	}
	if p.NoIMSDKeys && len(p.Keys) == 0 && len(p.Identities) == 0 {
		return errors.New("no-imsd-keys: with no key of your own (--key) and no identity (--identity), nothing would be trusted")
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
	if !p.Active() {
		return "no signature required"
	}
	mode := p.Mode
	if mode == "" {
		mode = SupplyChainRefuse
	}
	keys := "imsd's pinned keys"
	switch {
	case p.NoIMSDKeys:
		keys = fmt.Sprintf("%d key(s) of yours, not imsd's", len(p.Keys))
	case len(p.Keys) > 0:
		keys += fmt.Sprintf(" and %d further key(s)", len(p.Keys))
	}
	var rules []string
	if p.RequireSignature {
		rules = append(rules, "signature required")
	}
	for _, a := range p.RequireAttestations {
		rules = append(rules, "attestation "+a+" required")
	}
	if p.DenyVulnerabilities != "" {
		rules = append(rules, "vulnerabilities of severity "+p.DenyVulnerabilities+" or above denied")
	}
	if len(p.Identities) > 0 {
		keys += fmt.Sprintf(" and %d keyless identit(y/ies)", len(p.Identities))
	}
	warn := ""
	if len(p.WarnOn) > 0 && !p.Warn() {
		warn = " (warn only: " + strings.Join(p.WarnOn, ", ") + ")"
	}
	return fmt.Sprintf("%s (by %s); otherwise %s%s", strings.Join(rules, ", "), keys, mode, warn)
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
