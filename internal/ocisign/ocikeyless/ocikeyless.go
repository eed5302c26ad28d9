// Package ocikeyless signs build artifacts keylessly and verifies those
// signatures (ocisign verifies keyed ones; this is apart so that what
// verifies only keys, such as the console, does not link sigstore-go).
//
// A keyless signature of an artifact is cosign's simple-signing payload
// of its manifest digest, signed with an ephemeral key whose certificate
// a Fulcio-compatible CA issued for the signer's workload identity, and
// timestamped by an RFC 3161 timestamp authority
// (internal/attest/keylesssign). It is stored twice: as a referrer of
// the manifest (ocisign.KeylessSignatureArtifactType: the payload and the
// Sigstore bundle), which byoc verifies, and as cosign's keyless layer
// in the .sig tag (internal/cosignlayout), which `cosign verify
// --certificate-identity-regexp ... --use-signed-timestamps` verifies.
package ocikeyless

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// maxLayerBytes bounds each layer of a keyless signature read.
const maxLayerBytes = 64 << 10

// MessageSigner signs a message keylessly (keylesssign.Signer's
// SignMessage).
// It returns the signature's bundle and the CA's chain above the
// bundle's certificate (intermediates, then the root; may be empty).
type MessageSigner func(ctx context.Context, msg []byte) (*bundle.Bundle, []*x509.Certificate, error)

// Sign signs the build artifact md keylessly with signMessage:
// cosign's simple-signing payload of md is signed, and pushed with the
// signature's bundle as a referrer of md (ocisign.KeylessSignatureArtifactType),
// and as cosign's keyless signature layer in its .sig tag
// (cosignlayout.AddKeylessSignature), for `cosign verify
// --certificate-identity`. It returns the signer
// ("keyless:ISSUER:SUBJECT", as the certificate names it).
func Sign(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, signMessage MessageSigner) (string, error) {
	payload, err := cosignlayout.Payload(ocisign.ImageReference(repo), md.Digest)
	if err != nil {
		return "", err
	}
	bun, chain, err := signMessage(ctx, payload)
	if err != nil {
		return "", err
	}
	bb, err := bun.MarshalJSON()
	if err != nil {
		return "", err
	}
	vc, err := bun.VerificationContent()
	if err != nil {
		return "", err
	}
	cert := vc.Certificate()
	ms := bun.GetMessageSignature()
	tss, err := bun.Timestamps()
	if cert == nil || ms == nil || err != nil || len(tss) == 0 {
		return "", errors.New("the keyless signature's bundle lacks a certificate, a message signature or a timestamp")
	}
	sum, err := certificate.SummarizeCertificate(cert)
	if err != nil {
		return "", fmt.Errorf("the keyless signature's certificate: %w", err)
	}
	signer := "keyless:" + sum.Issuer + ":" + sum.SubjectAlternativeName
	pd := content.NewDescriptorFromBytes(cosignlayout.SimpleSigningMediaType, payload)
	bd := content.NewDescriptorFromBytes(attest.BundleMediaType, bb)
	for _, l := range []struct {
		d ocispec.Descriptor
		b []byte
	}{{pd, payload}, {bd, bb}} {
		if ok, err := repo.Exists(ctx, l.d); err != nil {
			return "", fmt.Errorf("push the keyless signature: %w", err)
		} else if !ok {
			if err := repo.Push(ctx, l.d, bytes.NewReader(l.b)); err != nil {
				return "", fmt.Errorf("push the keyless signature: %w", err)
			}
		}
	}
	subject := ocispec.Descriptor{MediaType: md.MediaType, Digest: md.Digest, Size: md.Size}
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ocisign.KeylessSignatureArtifactType, oras.PackManifestOptions{
		Subject: &subject,
		Layers:  []ocispec.Descriptor{pd, bd},
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			ocisign.AnnotationKeyID: signer},
	}); err != nil {
		return "", fmt.Errorf("push the keyless signature manifest: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	var chainPEM []byte
	for _, c := range chain {
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if _, err := cosignlayout.AddKeylessSignature(ctx, repo, md.Digest, payload, ms.GetSignature(), certPEM, chainPEM, tss[0]); err != nil {
		return "", fmt.Errorf("push the cosign keyless signature: %w", err)
	}
	return signer, nil
}

// Trust is the keyless signers a verifier trusts: one of Identities,
// under Root. It is an ocisign.KeylessVerifier.
type Trust struct {
	Root       root.TrustedMaterial
	Identities []attest.Identity
}

// VerifyKeyless verifies the keyless signature manifest r (Sign's), a
// referrer of md: its bundle verifies the payload under t
// (attest.VerifyKeylessMessage: the certificate chains to a certificate
// authority of t.Root, an RFC 3161 timestamp from one of its timestamp
// authorities falls within the certificate's validity, the certificate
// names one of t.Identities), and the payload names md.
func (t Trust) VerifyKeyless(ctx context.Context, repo *ocicopy.Repo, r ocispec.Descriptor, md digest.Digest) (string, error) {
	if t.Root == nil || len(t.Identities) == 0 {
		return "", errors.New("signed keylessly, and no keyless identity is trusted")
	}
	b, err := content.FetchAll(ctx, repo, r)
	if err != nil {
		return "", err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	if len(m.Layers) != 2 || m.Layers[0].MediaType != cosignlayout.SimpleSigningMediaType || m.Layers[1].MediaType != attest.BundleMediaType ||
		m.Layers[0].Size > maxLayerBytes || m.Layers[1].Size > maxLayerBytes {
		return "", errors.New("not a payload and a Sigstore bundle layer")
	}
	payload, err := content.FetchAll(ctx, repo, m.Layers[0])
	if err != nil {
		return "", err
	}
	bb, err := content.FetchAll(ctx, repo, m.Layers[1])
	if err != nil {
		return "", err
	}
	signer, err := attest.VerifyKeylessMessage(bb, payload, t.Root, t.Identities)
	if err != nil {
		return "", err
	}
	signed, err := cosignlayout.PayloadDigest(payload)
	if err != nil {
		return "", fmt.Errorf("signed as %s: %w", signer, err)
	}
	if signed != md {
		return "", fmt.Errorf("signed as %s: it signs digest %s, not the artifact's", signer, signed)
	}
	return signer, nil
}

// Trusted names t's identities.
func (t Trust) Trusted() string {
	var names []string
	for _, id := range t.Identities {
		names = append(names, id.String())
	}
	return "keyless identities " + strings.Join(names, "; ")
}
