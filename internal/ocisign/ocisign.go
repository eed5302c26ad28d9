// Package ocisign is byoc's one signature of an OCI artifact: a second
// manifest whose subject is the signed manifest (an OCI 1.1 referrer),
// so it travels with the artifact in every copy that carries referrers
// (internal/ocicopy does by default), holding one JSON layer: an Ed25519
// signature of a type, a version and the manifest digest (SignedMessage)
// and the signing key's id (agentproto.KeyID). Sign also writes, with
// the same key, cosign's signature of the manifest in cosign's tag
// layout (internal/cosignlayout), for `cosign verify --key`.
//
// A build artifact may also be signed keylessly (internal/ocisign/ocikeyless:
// a referrer of type KeylessSignatureArtifactType); VerifyTrusted
// accepts such a signature when its KeylessVerifier does.
//
// Plugin and agent releases (internal/plugindist) sign their type and
// version. Artifacts the build agent syncs or packages (images, charts,
// modules) sign the type ArtifactType and an empty version; a plugin
// release's signature always has a version, so neither stands for the
// other.
package ocisign

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// The signature manifest's artifact type and its layer's media type (the
// names date from plugin releases, the first signed artifacts; every
// signature uses them).
const (
	SignatureArtifactType = "application/vnd.byoc.plugin.signature.v1"
	SignatureMediaType    = "application/vnd.byoc.plugin.signature.v1+json"
	// AnnotationKeyID is the signing key's id, on the signature manifest.
	AnnotationKeyID = "dev.byoc.plugin.signature.key_id"
)

// Limits on what is read from a registry.
const (
	maxManifestBytes  = 1 << 20
	maxSignatureBytes = 64 << 10
	// MaxSignatures bounds the referrers listed per artifact.
	MaxSignatures = 64
)

// ArtifactType is the signed type of an artifact the build agent synced
// or packaged; its signed version is empty. The digest alone says what
// it is.
const ArtifactType = "artifact:oci"

// SignedMessage is what a signature signs: the bytes
// "byoc plugin signature v1\0", then the type, the version and the
// manifest digest, each a 4-byte big-endian length and the bytes. No
// job signature starts that way, so neither can stand for the other.
func SignedMessage(typ, version string, manifest digest.Digest) []byte {
	m := []byte("byoc plugin signature v1\x00")
	for _, s := range []string{typ, version, manifest.String()} {
		m = binary.BigEndian.AppendUint32(m, uint32(len(s)))
		m = append(m, s...)
	}
	return m
}

// Signature is the signature manifest's one layer.
type Signature struct {
	Type     string `json:"type"`
	Version  string `json:"version"`
	Manifest string `json:"manifest"`
	// KeyID is agentproto.KeyID of the signing key.
	KeyID string `json:"key_id"`
	// Signature is base64 Ed25519(key, SignedMessage).
	Signature string `json:"signature"`
}

// Sign pushes a signature of the manifest md (as type typ, version
// version) by key, as a referrer of md. Signing twice with the same key
// gives the same manifest.
func Sign(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, typ, version string, key crypto.Signer) (Signature, error) {
	pub, err := SignerPublicKey(key)
	if err != nil {
		return Signature{}, err
	}
	raw, err := SignEd25519(key, SignedMessage(typ, version, md.Digest))
	if err != nil {
		return Signature{}, err
	}
	sig := Signature{Type: typ, Version: version, Manifest: md.Digest.String(), KeyID: agentproto.KeyID(pub),
		Signature: base64.StdEncoding.EncodeToString(raw)}
	b, err := json.Marshal(sig)
	if err != nil {
		return Signature{}, err
	}
	ld := content.NewDescriptorFromBytes(SignatureMediaType, b)
	if ok, err := repo.Exists(ctx, ld); err != nil {
		return Signature{}, fmt.Errorf("push the signature: %w", err)
	} else if !ok {
		if err := repo.Push(ctx, ld, strings.NewReader(string(b))); err != nil {
			return Signature{}, fmt.Errorf("push the signature: %w", err)
		}
	}
	subject := ocispec.Descriptor{MediaType: md.MediaType, Digest: md.Digest, Size: md.Size}
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, SignatureArtifactType, oras.PackManifestOptions{
		Subject: &subject,
		Layers:  []ocispec.Descriptor{ld},
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			AnnotationKeyID: sig.KeyID},
	}); err != nil {
		return Signature{}, fmt.Errorf("push the signature manifest: %w", err)
	}
	// The same key signs cosign's simple-signing payload into cosign's
	// .sig tag, so `cosign verify --key` finds it (internal/cosignlayout).
	payload, err := cosignlayout.Payload(ImageReference(repo), md.Digest)
	if err != nil {
		return Signature{}, err
	}
	psig, err := SignEd25519(key, payload)
	if err != nil {
		return Signature{}, err
	}
	if _, err := cosignlayout.AddSignature(ctx, repo, md.Digest, payload, psig); err != nil {
		return Signature{}, fmt.Errorf("push the cosign signature: %w", err)
	}
	return sig, nil
}

// SignerPublicKey is the Ed25519 public key of key: a file key
// (ed25519.PrivateKey) or a KMS key (agentd/kmskey).
func SignerPublicKey(key crypto.Signer) (ed25519.PublicKey, error) {
	if key == nil {
		return nil, errors.New("no signing key")
	}
	pub, ok := key.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the signing key is %T, not Ed25519", key.Public())
	}
	return pub, nil
}

// SignEd25519 signs msg whole (pure Ed25519: crypto.Hash(0)) with key,
// and checks the signature under key's public key, so that a signer
// answering with another key's signature (a KMS key swapped behind its
// id) fails here, not at the customer's.
func SignEd25519(key crypto.Signer, msg []byte) ([]byte, error) {
	pub, err := SignerPublicKey(key)
	if err != nil {
		return nil, err
	}
	sig, err := key.Sign(rand.Reader, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if !ed25519.Verify(pub, msg, sig) {
		return nil, fmt.Errorf("sign: the signature does not verify under the signing key %s", agentproto.KeyID(pub))
	}
	return sig, nil
}

// KeylessSignatureArtifactType is the artifact type of a keyless
// signature's manifest (ocikeyless.Sign), a referrer of the signed
// manifest. Its two layers: cosign's simple-signing payload naming the
// manifest's digest (cosignlayout.SimpleSigningMediaType), and the
// Sigstore bundle of the payload's keyless signature
// (attest.BundleMediaType: a message signature, the certificate and an
// RFC 3161 timestamp).
const KeylessSignatureArtifactType = "application/vnd.byoc.signature.keyless.v1"

// ImageReference is the repository's image reference (registry host and
// repository, as its name already is) as a cosign payload names it; a
// layout's is its name.
func ImageReference(repo *ocicopy.Repo) string { return repo.Name() }

// ErrUnsigned is wrapped by Verify's error for an artifact with no
// signature by a trusted key.
var ErrUnsigned = errors.New("no signature by a trusted key")

// Verify finds a signature of md (as type typ, version version) by one
// of trusted among its referrers in repo and returns the signing key's
// id. An artifact with none is refused (ErrUnsigned), naming what its
// signatures were made with; what names it in the error.
func Verify(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, typ, version, what string, trusted []ed25519.PublicKey) (string, error) {
	return VerifyTrusted(ctx, repo, md, typ, version, what, trusted, nil)
}

// KeylessVerifier verifies keyless signatures (internal/ocisign/ocikeyless,
// apart so that what only verifies keys does not link sigstore-go).
type KeylessVerifier interface {
	// VerifyKeyless verifies the keyless signature manifest r, a
	// referrer of the manifest md in repo, and returns its signer.
	VerifyKeyless(ctx context.Context, repo *ocicopy.Repo, r ocispec.Descriptor, md digest.Digest) (string, error)
	// Trusted describes the signers trusted, for an error.
	Trusted() string
}

// VerifyTrusted is Verify trusting keyless signers too: a build
// artifact's (type ArtifactType, no version) keyless signature
// (KeylessSignatureArtifactType) counts when kl verifies it (nil: none
// does). It returns the key's id, or the keyless signer's
// ("keyless:ISSUER:SUBJECT").
func VerifyTrusted(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, typ, version, what string, trusted []ed25519.PublicKey, kl KeylessVerifier) (string, error) {
	refs, err := repo.Referrers(ctx, md, MaxSignatures)
	if err != nil {
		return "", fmt.Errorf("%s: list its signatures: %w", what, err)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range trusted {
		keys[agentproto.KeyID(k)] = k
	}
	var seen []string
	for _, r := range refs {
		if r.Size > maxManifestBytes {
			continue
		}
		if r.ArtifactType == KeylessSignatureArtifactType && typ == ArtifactType && version == "" {
			signer, err := "", errors.New("signed keylessly, and no keyless identity is trusted")
			if kl != nil {
				signer, err = kl.VerifyKeyless(ctx, repo, r, md.Digest)
			}
			if err != nil {
				seen = append(seen, fmt.Sprintf("keyless signature %s (%v)", r.Digest, err))
				continue
			}
			return signer, nil
		}
		if r.ArtifactType != SignatureArtifactType {
			continue
		}
		sig, err := readSignature(ctx, repo, r)
		if err != nil {
			seen = append(seen, fmt.Sprintf("%s (%v)", r.Digest, err))
			continue
		}
		k, ok := keys[sig.KeyID]
		if !ok {
			seen = append(seen, "key "+sig.KeyID+" (not trusted)")
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig.Signature)
		if err != nil || sig.Type != typ || sig.Version != version || sig.Manifest != md.Digest.String() ||
			!ed25519.Verify(k, SignedMessage(typ, version, md.Digest), raw) {
			seen = append(seen, "key "+sig.KeyID+" (the signature does not match the artifact)")
			continue
		}
		return sig.KeyID, nil
	}
	ids := slices.Sorted(maps.Keys(keys))
	found := "it has no signature"
	if len(seen) > 0 {
		found = "its signatures: " + strings.Join(seen, "; ")
	}
	trust := "keys " + strings.Join(ids, ", ")
	if kl != nil && typ == ArtifactType && version == "" {
		trust += "; " + kl.Trusted()
	}
	return "", fmt.Errorf("%s (%s): %w (trusted: %s); %s", what, md.Digest, ErrUnsigned, trust, found)
}

func readSignature(ctx context.Context, repo *ocicopy.Repo, d ocispec.Descriptor) (Signature, error) {
	b, err := content.FetchAll(ctx, repo, d)
	if err != nil {
		return Signature{}, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Signature{}, err
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != SignatureMediaType || m.Layers[0].Size > maxSignatureBytes {
		return Signature{}, errors.New("not one signature layer")
	}
	sb, err := content.FetchAll(ctx, repo, m.Layers[0])
	if err != nil {
		return Signature{}, err
	}
	var sig Signature
	if err := json.Unmarshal(sb, &sig); err != nil {
		return Signature{}, err
	}
	return sig, nil
}

// ReadPrivateKey reads an Ed25519 private key in PKCS#8 PEM, the format
// of imsd's job signing key (imsd --signing-key).
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block (want a PKCS#8 Ed25519 private key, such as imsd's signing key)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key", path, k)
	}
	return key, nil
}
