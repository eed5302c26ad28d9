// Package plugindist is a plugin release as an OCI artifact: what
// "byoc plugin publish" pushes, "byoc plugin register oci://" reads the
// schema from, and "agentd plugin install" fetches, verifies and
// installs.
//
// A release is an OCI 1.1 image manifest of artifact type ArtifactType
// whose config is the plugin's describe output (DescribeMediaType) and
// whose layers are its binaries, one per OS/architecture
// (BinaryMediaType, the platform in AnnotationPlatform). Its signature is
// a second manifest (SignatureArtifactType, internal/ocisign) whose subject is the
// release, so it travels with it in every copy that copies referrers
// (internal/ocicopy does by default): an Ed25519 signature, by imsd's
// job signing key, of the release's type, version and manifest digest
// (SignedMessage). The agent verifies it with the imsd keys it pinned at
// enrolment, so no other trust is configured.
package plugindist

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// Media and artifact types of a plugin release and its signature.
const (
	ArtifactType          = "application/vnd.byoc.plugin.v1"
	DescribeMediaType     = "application/vnd.byoc.plugin.describe.v1+json"
	BinaryMediaType       = "application/vnd.byoc.plugin.binary.v1"
	SignatureArtifactType = ocisign.SignatureArtifactType
	SignatureMediaType    = ocisign.SignatureMediaType
	// AnnotationPlatform is a binary layer's OS/architecture (linux/amd64).
	AnnotationPlatform = "dev.byoc.plugin.platform"
	// AnnotationType and AnnotationVersion are the release's type and
	// version, on its manifest.
	AnnotationType    = "dev.byoc.plugin.type"
	AnnotationVersion = "dev.byoc.plugin.version"
)

// Limits on what is read from a registry.
const (
	maxManifestBytes = 1 << 20
	maxDescribeBytes = 1 << 20
	maxBinaryBytes   = 1 << 30
)

var (
	typeName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	platform = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9]+$`)
)

// Release is what a publish packs.
type Release struct {
	// Type and Version are the describe output's; publish checks they
	// agree.
	Type, Version string
	// Describe is the plugin's describe output, stored as the config.
	Describe []byte
	// Binaries are the plugin's binaries by platform (linux/amd64).
	Binaries map[string][]byte
}

// Describe's type and version, for checks.
type describeHead struct {
	Type    string `json:"type"`
	Version string `json:"version"`
}

func parseHead(b []byte) (describeHead, error) {
	var h describeHead
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("describe output is not JSON: %w", err)
	}
	if !typeName.MatchString(h.Type) {
		return h, fmt.Errorf("describe output: type %q: use lowercase letters, digits, _ and -", h.Type)
	}
	if h.Version == "" {
		return h, errors.New("describe output: version is empty")
	}
	return h, nil
}

// Check checks a release before it is packed: the describe output names
// its type and version, and every platform is OS/ARCH.
func (r Release) Check() error {
	h, err := parseHead(r.Describe)
	if err != nil {
		return err
	}
	if h.Type != r.Type {
		return fmt.Errorf("the binary describes type %q, not %q (--name)", h.Type, r.Type)
	}
	if h.Version != r.Version {
		return fmt.Errorf("the binary describes version %q, not %q (--version)", h.Version, r.Version)
	}
	if len(r.Binaries) == 0 {
		return errors.New("no binaries")
	}
	for p, b := range r.Binaries {
		if !platform.MatchString(p) {
			return fmt.Errorf("platform %q: want OS/ARCH such as linux/amd64", p)
		}
		if len(b) == 0 {
			return fmt.Errorf("the %s binary is empty", p)
		}
	}
	return nil
}

// Push packs r into repo, tags it tag (when not empty) and returns the
// manifest's descriptor. The same release always gives the same digest.
func Push(ctx context.Context, repo *ocicopy.Repo, tag string, r Release) (ocispec.Descriptor, error) {
	if err := r.Check(); err != nil {
		return ocispec.Descriptor{}, err
	}
	config := content.NewDescriptorFromBytes(DescribeMediaType, r.Describe)
	if err := pushBlob(ctx, repo, config, r.Describe); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push the describe output: %w", err)
	}
	var layers []ocispec.Descriptor
	for _, p := range slices.Sorted(maps.Keys(r.Binaries)) {
		d := content.NewDescriptorFromBytes(BinaryMediaType, r.Binaries[p])
		d.Annotations = map[string]string{AnnotationPlatform: p, ocispec.AnnotationTitle: "byoc-plugin-" + r.Type}
		if err := pushBlob(ctx, repo, d, r.Binaries[p]); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push the %s binary: %w", p, err)
		}
		layers = append(layers, d)
	}
	md, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
		ConfigDescriptor: &config,
		Layers:           layers,
		// A fixed creation time keeps the digest a function of the
		// release's content.
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z",
			AnnotationType: r.Type, AnnotationVersion: r.Version},
	})
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("pack the manifest: %w", err)
	}
	if tag != "" {
		if err := repo.Tag(ctx, md, tag); err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", tag, err)
		}
	}
	return md, nil
}

func pushBlob(ctx context.Context, repo *ocicopy.Repo, d ocispec.Descriptor, b []byte) error {
	if ok, err := repo.Exists(ctx, d); err != nil {
		return err
	} else if ok {
		return nil
	}
	return repo.Push(ctx, d, bytes.NewReader(b))
}

// SignedMessage is what a release's signature signs (ocisign.SignedMessage).
func SignedMessage(typ, version string, manifest digest.Digest) []byte {
	return ocisign.SignedMessage(typ, version, manifest)
}

// Signature is the signature manifest's one layer (ocisign.Signature).
type Signature = ocisign.Signature

// Sign pushes a signature of the release md (of type typ, version
// version) by key, as a referrer of md (ocisign.Sign).
func Sign(ctx context.Context, repo *ocicopy.Repo, md ocispec.Descriptor, typ, version string, key crypto.Signer) (Signature, error) {
	return ocisign.Sign(ctx, repo, md, typ, version, key)
}

// Manifest is a release's manifest as read and checked by Read.
type Manifest struct {
	Descriptor ocispec.Descriptor
	Type       string
	Version    string
	// Describe is the describe output (the config), read and verified.
	Describe []byte
	// Layers are the binaries by platform.
	Layers map[string]ocispec.Descriptor
}

// ErrNotRelease is wrapped by Read's error for content that is not a
// plugin release or does not match its digest: a fault of the content
// itself (what agentd plugin install refuses and journals), not of the
// registry's reachability.
var ErrNotRelease = errors.New("not a plugin release")

// notReleaseError is an error of Read that is ErrNotRelease, its text
// unchanged.
type notReleaseError struct{ error }

func (e notReleaseError) Unwrap() error        { return e.error }
func (e notReleaseError) Is(target error) bool { return target == ErrNotRelease }

func notRelease(err error) error { return notReleaseError{err} }

// contentFault marks err ErrNotRelease when it is content that does not
// match its digest (as read), and leaves it as it is otherwise (the
// registry could not be read).
func contentFault(err error) error {
	if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) || errors.Is(err, ocicopy.ErrDigestMismatch) {
		return notRelease(err)
	}
	return err
}

// Platforms lists the release's platforms.
func (m *Manifest) Platforms() []string { return slices.Sorted(maps.Keys(m.Layers)) }

// Read reads the release at digest dg in repo: its manifest and describe
// output, each checked against its digest, and refuses anything that is
// not a plugin release. It does not check the signature (Verify does).
func Read(ctx context.Context, repo *ocicopy.Repo, dg digest.Digest) (*Manifest, error) {
	desc, err := repo.Resolve(ctx, dg.String())
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", repo.Name(), dg, err)
	}
	if desc.Digest != dg {
		return nil, notRelease(fmt.Errorf("%s@%s: digest mismatch: the registry answered %s", repo.Name(), dg, desc.Digest))
	}
	if desc.Size <= 0 || desc.Size > maxManifestBytes {
		return nil, notRelease(fmt.Errorf("%s@%s: a manifest of %d bytes is not a plugin release", repo.Name(), dg, desc.Size))
	}
	b, err := content.FetchAll(ctx, repo, desc)
	if err != nil {
		return nil, contentFault(fmt.Errorf("%s@%s: read the manifest: %w", repo.Name(), dg, err))
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, notRelease(fmt.Errorf("%s@%s: the manifest: %w", repo.Name(), dg, err))
	}
	if m.ArtifactType != ArtifactType || m.Config.MediaType != DescribeMediaType {
		return nil, notRelease(fmt.Errorf("%s@%s is not a plugin release (artifact type %q, config %q; want %s, published with byoc plugin publish)",
			repo.Name(), dg, m.ArtifactType, m.Config.MediaType, ArtifactType))
	}
	if m.Config.Size > maxDescribeBytes {
		return nil, notRelease(fmt.Errorf("%s@%s: the describe output is %d bytes; at most %d are allowed", repo.Name(), dg, m.Config.Size, maxDescribeBytes))
	}
	d, err := content.FetchAll(ctx, repo, m.Config)
	if err != nil {
		return nil, contentFault(fmt.Errorf("%s@%s: read the describe output %s: %w", repo.Name(), dg, m.Config.Digest, err))
	}
	h, err := parseHead(d)
	if err != nil {
		return nil, notRelease(fmt.Errorf("%s@%s: %w", repo.Name(), dg, err))
	}
	if m.Annotations[AnnotationType] != h.Type || m.Annotations[AnnotationVersion] != h.Version {
		return nil, notRelease(fmt.Errorf("%s@%s: the manifest names %s %s but its describe output %s %s",
			repo.Name(), dg, m.Annotations[AnnotationType], m.Annotations[AnnotationVersion], h.Type, h.Version))
	}
	out := &Manifest{Descriptor: desc, Type: h.Type, Version: h.Version, Describe: d, Layers: map[string]ocispec.Descriptor{}}
	for _, l := range m.Layers {
		p := l.Annotations[AnnotationPlatform]
		if l.MediaType != BinaryMediaType || !platform.MatchString(p) {
			return nil, notRelease(fmt.Errorf("%s@%s: layer %s is not a plugin binary with a platform", repo.Name(), dg, l.Digest))
		}
		if _, dup := out.Layers[p]; dup {
			return nil, notRelease(fmt.Errorf("%s@%s: two binaries for %s", repo.Name(), dg, p))
		}
		out.Layers[p] = l
	}
	return out, nil
}

// ErrUnsigned is wrapped by Verify's error for a release with no
// signature by a trusted key.
var ErrUnsigned = ocisign.ErrUnsigned

// Verify finds a signature of m by one of trusted among its referrers in
// repo and returns the signing key's id. A release with none is refused
// (ErrUnsigned), naming the keys its signatures were made with.
func Verify(ctx context.Context, repo *ocicopy.Repo, m *Manifest, trusted []ed25519.PublicKey) (string, error) {
	return ocisign.Verify(ctx, repo, m.Descriptor, m.Type, m.Version, m.what(), trusted)
}

// what names the release in errors: "plugin terraform 1.2.0", or "agent
// release 1.5.0" for an agent release (ReadAgent's), which is no plugin.
func (m *Manifest) what() string {
	if m.Type == AgentType {
		return "agent release " + m.Version
	}
	return "plugin " + m.Type + " " + m.Version
}

// FetchBinary reads the release's binary for platform p, checked against
// its digest.
func FetchBinary(ctx context.Context, repo *ocicopy.Repo, m *Manifest, p string) ([]byte, error) {
	l, ok := m.Layers[p]
	if !ok {
		return nil, fmt.Errorf("%s (%s) has no binary for %s; it has: %s",
			m.what(), m.Descriptor.Digest, p, strings.Join(m.Platforms(), ", "))
	}
	if l.Size > maxBinaryBytes {
		return nil, fmt.Errorf("%s: the %s binary is %d bytes; at most %d are allowed", m.what(), p, l.Size, maxBinaryBytes)
	}
	b, err := content.FetchAll(ctx, repo, l)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): the %s binary %s: %w", m.what(), m.Descriptor.Digest, p, l.Digest, err)
	}
	return b, nil
}

// ParseRef reads a release's reference: oci://HOST[:PORT]/REPOSITORY
// [:TAG]@sha256:HEX (a registry, plain HTTP for a loopback host), or
// what ocicopy.ParseReference reads (oci:DIR@sha256:HEX for a layout).
// A digest is required: a tag can move.
func ParseRef(s string) (ocicopy.Reference, error) {
	ref, err := ocicopy.ParseReference(strings.TrimPrefix(s, "oci://"))
	if err != nil {
		return ref, err
	}
	if ref.Digest == "" {
		return ref, fmt.Errorf("reference %q %w", s, ocicopy.ErrNoDigest)
	}
	return ref, nil
}
