// Package attest is byoc's attestations of an OCI artifact: in-toto
// Statements (v1) about the artifact's manifest digest, such as SLSA
// provenance (v1) of the build agent's sync or package, an SBOM the
// source carried, or a vulnerability scan (cosign's vuln predicate),
// each a Sigstore bundle (v0.3) of a DSSE envelope signed with an
// Ed25519 key and attached, like internal/ocisign's signature, as an
// OCI 1.1 referrer of the artifact (artifact type the bundle's media
// type, as cosign attaches bundles), so it travels with the artifact in
// every copy that carries referrers (internal/ocicopy). The envelope is
// also written into cosign's .att tag (internal/cosignlayout) for
// `cosign verify-attestation --key`.
//
// A bundle's public key hint is agentproto.KeyID of the signing key, the
// id internal/ocisign's signatures carry; a verifier (sigstore-go's,
// with key-based trusted material) accepts an attestation only when it
// verifies under one of the keys it trusts and its statement's subject
// is the artifact's digest.
package attest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The referrer's artifact type and its one layer's media type: a
// Sigstore bundle v0.3 (the type cosign attaches bundles with).
const (
	BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// AnnotationPredicateType, on the referrer's manifest, says what the
	// envelope attests without reading it (cosign's referrers name it
	// the same way).
	AnnotationPredicateType = "dev.sigstore.bundle.predicateType"
	// AnnotationKeyID is the signing key's id.
	AnnotationKeyID = "dev.byoc.attestation.key_id"
)

// In-toto and predicate types.
const (
	PayloadType        = "application/vnd.in-toto+json"
	StatementType      = "https://in-toto.io/Statement/v1"
	SLSAProvenanceV1   = "https://slsa.dev/provenance/v1"
	SPDXPredicate      = "https://spdx.dev/Document"
	CycloneDXPredicate = "https://cyclonedx.org/bom"
	// VulnPredicate is cosign's vulnerability scan predicate.
	VulnPredicate = "https://cosign.sigstore.dev/attestation/vuln/v1"
)

// Limits on what is read from a registry.
const (
	maxManifestBytes = 1 << 20
	// MaxEnvelopeBytes bounds one envelope (an SBOM can be large).
	MaxEnvelopeBytes = 16 << 20
	// MaxAttestations bounds the referrers listed per artifact.
	MaxAttestations = 64
)

// Subject is an in-toto resource descriptor naming the artifact.
type Subject struct {
	Name   string            `json:"name,omitempty"`
	Digest map[string]string `json:"digest"`
}

// Statement is an in-toto Statement v1.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// ResourceDescriptor is an in-toto resource descriptor (SLSA's
// resolvedDependencies, byproducts).
type ResourceDescriptor struct {
	URI         string            `json:"uri,omitempty"`
	Digest      map[string]string `json:"digest,omitempty"`
	Name        string            `json:"name,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Provenance is the SLSA provenance v1 predicate.
type Provenance struct {
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   map[string]any       `json:"externalParameters"`
		InternalParameters   map[string]any       `json:"internalParameters,omitempty"`
		ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies,omitempty"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID      string            `json:"id"`
			Version map[string]string `json:"version,omitempty"`
		} `json:"builder"`
		Metadata struct {
			InvocationID string `json:"invocationId,omitempty"`
			StartedOn    string `json:"startedOn,omitempty"`
			FinishedOn   string `json:"finishedOn,omitempty"`
		} `json:"metadata"`
	} `json:"runDetails"`
}

// BuildType is the SLSA buildType of a build agent's sync or package.
const BuildType = "https://byoc.dev/build/v1"

// NewStatement is a statement of predicate (of type predicateType) about
// the manifest md of repository name.
func NewStatement(name string, md digest.Digest, predicateType string, predicate any) (Statement, error) {
	p, err := json.Marshal(predicate)
	if err != nil {
		return Statement{}, err
	}
	return Statement{Type: StatementType, PredicateType: predicateType, Predicate: p,
		Subject: []Subject{{Name: name, Digest: map[string]string{md.Algorithm().String(): md.Encoded()}}}}, nil
}

// pae is DSSE's pre-authentication encoding of a payload.
func pae(payloadType string, body []byte) []byte {
	return fmt.Appendf(nil, "DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(body), body)
}

// Bundle signs st with key as a Sigstore bundle (v0.3): a DSSE envelope
// of the statement whose verification material is a public key hint,
// agentproto.KeyID of the key.
func Bundle(_ context.Context, st Statement, key crypto.Signer) (*bundle.Bundle, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	pub, err := ocisign.SignerPublicKey(key)
	if err != nil {
		return nil, err
	}
	id := agentproto.KeyID(pub)
	sig, err := ocisign.SignEd25519(key, pae(PayloadType, body))
	if err != nil {
		return nil, err
	}
	pb := &protobundle.Bundle{
		MediaType: BundleMediaType,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: id}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: body, PayloadType: PayloadType,
			// The keyid stays empty, as in cosign's bundles: the key
			// is named by the hint (sigstore-go's DSSE verifier would
			// require go-securesystemslib's own key id here).
			Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	return bundle.NewBundle(pb)
}

// Attach signs st with key and pushes it as a referrer of md in repo.
// The same statement signed with the same key gives the same referrer.
func Attach(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, st Statement, key crypto.Signer) (ocispec.Descriptor, error) {
	bun, err := Bundle(ctx, st, key)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	pub, err := ocisign.SignerPublicKey(key)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return AttachBundle(ctx, repo, md, bun, st.PredicateType, agentproto.KeyID(pub))
}

// AttachBundle pushes the signed bundle bun, an attestation of
// predicateType signed by signer (a key id, or a keyless signer's
// identity), as a referrer of md in repo, and its envelope into
// cosign's .att tag.
func AttachBundle(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, bun *bundle.Bundle, predicateType, signer string) (ocispec.Descriptor, error) {
	b, err := bun.MarshalJSON()
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	ld := content.NewDescriptorFromBytes(BundleMediaType, b)
	if ok, err := repo.Exists(ctx, ld); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push the attestation: %w", err)
	} else if !ok {
		if err := repo.Push(ctx, ld, bytes.NewReader(b)); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push the attestation: %w", err)
		}
	}
	subject := ocispec.Descriptor{MediaType: md.MediaType, Digest: md.Digest, Size: md.Size}
	d, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, BundleMediaType, oras.PackManifestOptions{
		Subject: &subject,
		Layers:  []ocispec.Descriptor{ld},
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			AnnotationPredicateType: predicateType, AnnotationKeyID: signer},
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push the attestation manifest: %w", err)
	}
	// The bundle's envelope goes into cosign's .att tag too, for
	// `cosign verify-attestation --key` (internal/cosignlayout).
	env := bun.GetDsseEnvelope()
	ce := cosignlayout.Envelope{PayloadType: env.PayloadType, Payload: base64.StdEncoding.EncodeToString(env.Payload)}
	for _, s := range env.Signatures {
		ce.Signatures = append(ce.Signatures, cosignlayout.EnvelopeSignature{KeyID: s.Keyid, Sig: base64.StdEncoding.EncodeToString(s.Sig)})
	}
	if _, err := cosignlayout.AddAttestation(ctx, repo, md.Digest, ce, predicateType); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push the cosign attestation: %w", err)
	}
	return d, nil
}

// Verified is one attestation that verified: by a trusted key, about the
// artifact.
type Verified struct {
	PredicateType string
	KeyID         string
	Statement     Statement
}

// Found is what Find read of an artifact's attestations.
type Found struct {
	// Verified are the attestations signed by a trusted key whose
	// subject is the artifact.
	Verified []Verified
	// Rejected says, per attestation that did not verify, why.
	Rejected []string
}

// Has returns the verified attestations of predicate type t.
func (f Found) Has(types ...string) []Verified {
	var out []Verified
	for _, v := range f.Verified {
		if slices.Contains(types, v.PredicateType) {
			out = append(out, v)
		}
	}
	return out
}

// Types lists the verified predicate types, sorted, once each.
func (f Found) Types() []string {
	var out []string
	for _, v := range f.Verified {
		if !slices.Contains(out, v.PredicateType) {
			out = append(out, v.PredicateType)
		}
	}
	slices.Sort(out)
	return out
}

// Find reads the attestations among md's referrers in repo and verifies
// each: a DSSE envelope of an in-toto statement, signed by one of
// trusted, whose subject names md's digest.
func Find(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, trusted []ed25519.PublicKey) (Found, error) {
	return FindTrusted(ctx, repo, md, Trust{Keys: trusted})
}

// Trust is what an attestation may be signed by: one of Keys, or,
// keylessly, one of Identities under Root (see VerifyKeyless).
type Trust struct {
	Keys       []ed25519.PublicKey
	Root       root.TrustedMaterial
	Identities []Identity
}

// FindTrusted is Find with keyless signers trusted too: an attestation
// whose bundle carries a certificate is verified with VerifyKeyless
// against t.Root and t.Identities (refused when there are none).
func FindTrusted(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, t Trust) (Found, error) {
	refs, err := repo.Referrers(ctx, md, MaxAttestations)
	if err != nil {
		return Found{}, fmt.Errorf("list its attestations: %w", err)
	}
	var f Found
	for _, r := range refs {
		if r.ArtifactType != BundleMediaType || r.Size > maxManifestBytes {
			continue
		}
		v, err := verifyOne(ctx, repo, r, md.Digest, t)
		if err != nil {
			what := r.Annotations[AnnotationPredicateType]
			if what == "" {
				what = "attestation"
			}
			f.Rejected = append(f.Rejected, fmt.Sprintf("%s %s: %v", what, r.Digest, err))
			continue
		}
		f.Verified = append(f.Verified, v)
	}
	return f, nil
}

func verifyOne(ctx context.Context, repo *ocicopy.Repo, r ocispec.Descriptor, subject digest.Digest, t Trust) (Verified, error) {
	b, err := content.FetchAll(ctx, repo, r)
	if err != nil {
		return Verified{}, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Verified{}, err
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != BundleMediaType || m.Layers[0].Size > MaxEnvelopeBytes {
		return Verified{}, errors.New("not one Sigstore bundle layer")
	}
	eb, err := content.FetchAll(ctx, repo, m.Layers[0])
	if err != nil {
		return Verified{}, err
	}
	if keyless(eb) {
		if t.Root == nil || len(t.Identities) == 0 {
			return Verified{}, errors.New("signed keylessly, and no keyless identity is trusted")
		}
		return VerifyKeyless(eb, subject, t.Root, t.Identities)
	}
	return VerifyBundle(eb, subject, trustedMaterial(t.Keys))
}

// keyless reports whether the bundle bb's verification material is a
// certificate (or a chain).
func keyless(bb []byte) bool {
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(bb); err != nil {
		return false
	}
	vm := bun.GetVerificationMaterial()
	return vm.GetCertificate() != nil || vm.GetX509CertificateChain() != nil
}

// trustedMaterial is sigstore-go trusted material of the Ed25519 keys
// trusted, each found by its key id (agentproto.KeyID), valid always.
func trustedMaterial(trusted []ed25519.PublicKey) root.TrustedMaterial {
	keys := map[string]*root.ExpiringKey{}
	for _, k := range trusted {
		v, err := signature.LoadED25519Verifier(k)
		if err != nil {
			continue
		}
		keys[agentproto.KeyID(k)] = root.NewExpiringKey(v, time.Time{}, time.Time{})
	}
	return root.NewTrustedPublicKeyMaterialFromMapping(keys)
}

// TrustedMaterial is trustedMaterial, for callers verifying a bundle
// they read themselves.
func TrustedMaterial(trusted []ed25519.PublicKey) root.TrustedMaterial {
	return trustedMaterial(trusted)
}

// VerifyBundle verifies the Sigstore bundle bb, a DSSE envelope of an
// in-toto statement about subject, with sigstore-go's verifier against
// the keys in tm (key-based: no transparency log, no timestamps).
func VerifyBundle(bb []byte, subject digest.Digest, tm root.TrustedMaterial) (Verified, error) {
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(bb); err != nil {
		return Verified{}, fmt.Errorf("not a Sigstore bundle: %w", err)
	}
	env := bun.GetDsseEnvelope()
	if env == nil {
		return Verified{}, errors.New("not a DSSE envelope bundle")
	}
	if env.PayloadType != PayloadType {
		return Verified{}, fmt.Errorf("payload type %q, not %s", env.PayloadType, PayloadType)
	}
	hint := bun.GetVerificationMaterial().GetPublicKey().GetHint()
	if _, err := tm.PublicKeyVerifier(hint); err != nil {
		return Verified{}, fmt.Errorf("not signed by a trusted key (signed by key %s)", hint)
	}
	raw, err := hex.DecodeString(subject.Encoded())
	if err != nil || subject.Validate() != nil {
		return Verified{}, fmt.Errorf("artifact digest %q", subject)
	}
	v, err := verify.NewVerifier(tm, verify.WithNoObserverTimestamps())
	if err != nil {
		return Verified{}, err
	}
	if _, err := v.Verify(&bun, verify.NewPolicy(verify.WithArtifactDigest(subject.Algorithm().String(), raw), verify.WithKey())); err != nil {
		// Signed by the key but about another artifact, or not signed?
		if _, err2 := v.Verify(&bun, verify.NewPolicy(verify.WithoutArtifactUnsafe(), verify.WithKey())); err2 == nil {
			return Verified{}, fmt.Errorf("its subject is not the artifact %s", subject)
		}
		return Verified{}, fmt.Errorf("does not verify under key %s: %w", hint, err)
	}
	body := env.Payload
	keyID := hint
	var st Statement
	if err := json.Unmarshal(body, &st); err != nil {
		return Verified{}, fmt.Errorf("not an in-toto statement: %w", err)
	}
	if st.Type != StatementType && st.Type != "https://in-toto.io/Statement/v0.1" {
		return Verified{}, fmt.Errorf("statement type %q", st.Type)
	}
	about := false
	for _, s := range st.Subject {
		if s.Digest[subject.Algorithm().String()] == subject.Encoded() {
			about = true
		}
	}
	if !about {
		return Verified{}, fmt.Errorf("its subject is not the artifact %s", subject)
	}
	return Verified{PredicateType: st.PredicateType, KeyID: keyID, Statement: st}, nil
}

// Severities, least first.
var Severities = []string{"low", "medium", "high", "critical"}

// CountAtLeast counts the vulnerabilities of a scan's predicate (cosign's
// vuln predicate, whose scanner.result is the scanner's own report:
// Trivy's, Grype's or any other) whose severity is at least min: every
// object in the result with a "severity" (any case) naming one of
// Severities.
func CountAtLeast(predicate json.RawMessage, min string) (int, error) {
	floor := slices.Index(Severities, strings.ToLower(min))
	if floor < 0 {
		return 0, fmt.Errorf("severity %q: want one of %s", min, strings.Join(Severities, ", "))
	}
	var p struct {
		Scanner struct {
			Result any `json:"result"`
		} `json:"scanner"`
	}
	d := json.NewDecoder(bytes.NewReader(predicate))
	d.UseNumber()
	if err := d.Decode(&p); err != nil {
		return 0, fmt.Errorf("not a vulnerability scan predicate: %w", err)
	}
	if p.Scanner.Result == nil {
		return 0, errors.New("not a vulnerability scan predicate: no scanner.result")
	}
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && strings.EqualFold(k, "severity") && slices.Index(Severities, strings.ToLower(s)) >= floor {
					n++
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(p.Scanner.Result)
	return n, nil
}

// ProvenanceLevel is the SLSA Build level that a verified provenance
// attests: 2 (provenance exists, made and signed by the build platform,
// the build agent, with a key the verifier trusts, not by the build's
// own steps). Level 3 needs a hardened, isolated build platform, which
// the build agent does not claim, so no byoc provenance reaches it.
func ProvenanceLevel(Verified) int { return 2 }

// SBOMPredicateOf says which SBOM predicate type a file name or an OCI
// artifact type stands for: SPDX JSON (*.spdx.json,
// application/spdx+json) or CycloneDX JSON (*.cdx.json, bom.json,
// application/vnd.cyclonedx+json); ok is false for neither.
func SBOMPredicateOf(nameOrType string) (predicateType string, ok bool) {
	s := strings.ToLower(nameOrType)
	switch {
	case strings.HasSuffix(s, ".spdx.json"), strings.HasPrefix(s, "application/spdx+json"):
		return SPDXPredicate, true
	case strings.HasSuffix(s, ".cdx.json"), s == "bom.json", strings.HasSuffix(s, "/bom.json"),
		strings.HasPrefix(s, "application/vnd.cyclonedx+json"):
		return CycloneDXPredicate, true
	}
	return "", false
}
