// Package cosignlayout writes an artifact's signatures and attestations
// where the cosign CLI looks for them: cosign's tag layout, a manifest
// tagged sha256-<hex>.sig (simple-signing payloads, each a layer with
// its signature in an annotation, and for a keyless signature its
// certificate, chain and RFC 3161 timestamp) and one tagged sha256-<hex>.att (DSSE
// envelopes of in-toto statements), beside the artifact in its
// repository. A registry without the OCI 1.1 referrers API (Debian's
// docker-registry 2.8) serves these like any tag, so `cosign verify
// --key` and `cosign verify-attestation --key` find byoc's signatures
// in the vendor registry and, carried by internal/ocicopy (which copies
// these tags of a root), in every install registry; `cosign verify
// --certificate-identity-regexp ... --use-signed-timestamps` finds the
// build agent's keyless signature the same way.
//
// Each write adds one layer to the tag's manifest (as cosign does when
// a second key signs), and the same layer twice is written once, so
// signing again gives the same manifest.
package cosignlayout

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"

	"github.com/byoc-dev/byoc/internal/ocicopy"
)

// Cosign's names.
const (
	// SimpleSigningMediaType is a signature layer's media type.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// DSSEMediaType is an attestation layer's media type.
	DSSEMediaType = "application/vnd.dsse.envelope.v1+json"
	// AnnotationSignature holds a layer's base64 signature (empty for
	// an attestation: the envelope carries it).
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationCertificate, AnnotationChain and
	// AnnotationRFC3161Timestamp are a keyless signature's: the PEM
	// certificate of its ephemeral key, the PEM chain of the certificate
	// authority that issued it (may be empty), and its RFC 3161
	// timestamp as JSON {"SignedRFC3161Timestamp": base64 of the DER
	// TimeStampResponse}, over the raw signature's bytes (cosign's
	// bundle.RFC3161Timestamp).
	AnnotationCertificate      = "dev.sigstore.cosign/certificate"
	AnnotationChain            = "dev.sigstore.cosign/chain"
	AnnotationRFC3161Timestamp = "dev.sigstore.cosign/rfc3161timestamp"
	// AnnotationPredicateType names an attestation's predicate type.
	AnnotationPredicateType = "predicateType"
	// SignatureType is the simple-signing payload's critical.type.
	SignatureType = "cosign container image signature"
)

// Tag suffixes (internal/ocicopy's CosignTagSuffixes carries them,
// with cosign's .sbom).
const (
	SigSuffix = ".sig"
	AttSuffix = ".att"
)

// Tag is cosign's tag for the artifact d with suffix: sha256-<hex><suffix>.
func Tag(d digest.Digest, suffix string) string { return ocicopy.CosignTag(d, suffix) }

// maxManifestBytes bounds the existing tag manifest read before a write.
const maxManifestBytes = 1 << 20

// Payload is cosign's simple-signing payload for the manifest md of
// image (the repository's reference, such as registry/repo).
func Payload(image string, md digest.Digest) ([]byte, error) {
	var p struct {
		Critical struct {
			Identity struct {
				DockerReference string `json:"docker-reference"`
			} `json:"identity"`
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
		Optional map[string]any `json:"optional"`
	}
	p.Critical.Identity.DockerReference = image
	p.Critical.Image.DockerManifestDigest = md.String()
	p.Critical.Type = SignatureType
	return json.Marshal(p)
}

// Envelope is a DSSE envelope as cosign stores it in a .att layer.
type Envelope struct {
	PayloadType string              `json:"payloadType"`
	Payload     string              `json:"payload"`
	Signatures  []EnvelopeSignature `json:"signatures"`
}

// EnvelopeSignature is one of an envelope's signatures.
type EnvelopeSignature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// AddSignature adds to md's .sig tag in repo a simple-signing layer of
// payload with its signature sig (the raw signature bytes).
func AddSignature(ctx context.Context, repo *ocicopy.Repo, md digest.Digest, payload, sig []byte) (ocispec.Descriptor, error) {
	return addLayer(ctx, repo, Tag(md, SigSuffix), SimpleSigningMediaType, payload,
		map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)})
}

// AddKeylessSignature adds to md's .sig tag in repo the layer cosign
// writes for a keyless signature: payload, its signature sig (raw
// bytes) by the ephemeral key certified by certPEM (the CA's chain
// chainPEM, may be nil), and the RFC 3161 timestamp response tsr over
// sig, for `cosign verify --certificate-identity ...
// --use-signed-timestamps`.
func AddKeylessSignature(ctx context.Context, repo *ocicopy.Repo, md digest.Digest, payload, sig, certPEM, chainPEM, tsr []byte) (ocispec.Descriptor, error) {
	ts, err := json.Marshal(struct{ SignedRFC3161Timestamp []byte }{tsr})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return addLayer(ctx, repo, Tag(md, SigSuffix), SimpleSigningMediaType, payload, map[string]string{
		AnnotationSignature:        base64.StdEncoding.EncodeToString(sig),
		AnnotationCertificate:      string(certPEM),
		AnnotationChain:            string(chainPEM),
		AnnotationRFC3161Timestamp: string(ts),
	})
}

// PayloadDigest is the manifest digest a simple-signing payload names
// (critical.image.docker-manifest-digest); its critical.type must be
// SignatureType.
func PayloadDigest(payload []byte) (digest.Digest, error) {
	var p struct {
		Critical struct {
			Image struct {
				DockerManifestDigest digest.Digest `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", fmt.Errorf("not a simple-signing payload: %w", err)
	}
	if p.Critical.Type != SignatureType {
		return "", fmt.Errorf("simple-signing payload of type %q, not %q", p.Critical.Type, SignatureType)
	}
	if err := p.Critical.Image.DockerManifestDigest.Validate(); err != nil {
		return "", fmt.Errorf("simple-signing payload: docker-manifest-digest: %w", err)
	}
	return p.Critical.Image.DockerManifestDigest, nil
}

// AddAttestation adds to md's .att tag in repo a layer holding env, an
// envelope of a statement of predicateType.
func AddAttestation(ctx context.Context, repo *ocicopy.Repo, md digest.Digest, env Envelope, predicateType string) (ocispec.Descriptor, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return addLayer(ctx, repo, Tag(md, AttSuffix), DSSEMediaType, b,
		map[string]string{AnnotationSignature: "", AnnotationPredicateType: predicateType})
}

// config is the image config of a tag manifest: cosign's, an empty
// image whose diff ids are its layers.
type config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
	} `json:"config"`
	RootFS struct {
		Type    string          `json:"type"`
		DiffIDs []digest.Digest `json:"diff_ids"`
	} `json:"rootfs"`
}

func addLayer(ctx context.Context, repo *ocicopy.Repo, tag, mediaType string, body []byte, annotations map[string]string) (ocispec.Descriptor, error) {
	var m ocispec.Manifest
	old, err := repo.Resolve(ctx, tag)
	switch {
	case errors.Is(err, errdef.ErrNotFound):
	case err != nil:
		return ocispec.Descriptor{}, fmt.Errorf("read %s: %w", tag, err)
	case old.Size > maxManifestBytes:
		return ocispec.Descriptor{}, fmt.Errorf("read %s: its manifest is %d bytes", tag, old.Size)
	default:
		b, err := content.FetchAll(ctx, repo, old)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("read %s: %w", tag, err)
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("read %s: %w", tag, err)
		}
	}
	ld := content.NewDescriptorFromBytes(mediaType, body)
	ld.Annotations = annotations
	if slices.ContainsFunc(m.Layers, func(l ocispec.Descriptor) bool {
		return l.Digest == ld.Digest && l.Annotations[AnnotationSignature] == annotations[AnnotationSignature]
	}) {
		return old, nil
	}
	if err := pushBlob(ctx, repo, ld, body); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", tag, err)
	}
	m.Layers = append(m.Layers, ld)
	var cfg config
	cfg.RootFS.Type = "layers"
	for _, l := range m.Layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.Digest)
	}
	cb, err := json.Marshal(cfg)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	m.Versioned = specs.Versioned{SchemaVersion: 2}
	m.MediaType = ocispec.MediaTypeImageManifest
	m.Config = content.NewDescriptorFromBytes(ocispec.MediaTypeImageConfig, cb)
	if err := pushBlob(ctx, repo, m.Config, cb); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", tag, err)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	md := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, mb)
	if err := pushBlob(ctx, repo, md, mb); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push %s: %w", tag, err)
	}
	if err := repo.Tag(ctx, md, tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", tag, err)
	}
	return md, nil
}

func pushBlob(ctx context.Context, repo *ocicopy.Repo, d ocispec.Descriptor, b []byte) error {
	if ok, err := repo.Exists(ctx, d); err != nil {
		return err
	} else if ok {
		return nil
	}
	if err := repo.Push(ctx, d, bytes.NewReader(b)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return err
	}
	return nil
}
