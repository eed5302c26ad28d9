package cosignlayout_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// signed is an image in a fresh layout, signed and attested (SLSA
// provenance) by the build agent's calls, with key.
func signed(t *testing.T, key ed25519.PrivateKey) (*ocicopy.Repo, ocispec.Descriptor) {
	t.Helper()
	ctx := t.Context()
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: t.TempDir()}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	md, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 7, Layers: []int64{128}})
	if err != nil {
		t.Fatal(err)
	}
	md.Platform = nil
	if _, err := ocisign.Sign(ctx, repo, md, ocisign.ArtifactType, "", key); err != nil {
		t.Fatal(err)
	}
	st, err := attest.NewStatement("acme/web", md.Digest, attest.SLSAProvenanceV1, map[string]any{"builder": "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.Attach(ctx, repo, md, st, key); err != nil {
		t.Fatal(err)
	}
	return repo, md
}

func readTag(t *testing.T, ctx context.Context, repo *ocicopy.Repo, tag string) (ocispec.Descriptor, ocispec.Manifest, [][]byte) {
	t.Helper()
	d, err := repo.Resolve(ctx, tag)
	if err != nil {
		t.Fatalf("resolve %s: %v", tag, err)
	}
	b, err := content.FetchAll(ctx, repo, d)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var layers [][]byte
	for _, l := range m.Layers {
		lb, err := content.FetchAll(ctx, repo, l)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, lb)
	}
	return d, m, layers
}

// The build agent's signature and attestation land in cosign's tag
// layout: sha256-<hex>.sig holds a simple-signing payload naming the
// digest, signed by the key; sha256-<hex>.att a DSSE envelope of the
// statement, signed by the key over DSSE's PAE. Signing again changes
// nothing; a second key adds a layer.
func TestTagLayout(t *testing.T) {
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	repo, md := signed(t, key)

	sigTag := cosignlayout.Tag(md.Digest, cosignlayout.SigSuffix)
	if sigTag != "sha256-"+md.Digest.Encoded()+".sig" {
		t.Fatalf("tag %s", sigTag)
	}
	sd, m, layers := readTag(t, ctx, repo, sigTag)
	if len(m.Layers) != 1 || m.Layers[0].MediaType != cosignlayout.SimpleSigningMediaType {
		t.Fatalf(".sig layers %+v", m.Layers)
	}
	var p struct {
		Critical struct {
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(layers[0], &p); err != nil || p.Critical.Image.DockerManifestDigest != md.Digest.String() || p.Critical.Type != cosignlayout.SignatureType {
		t.Fatalf("payload %s (%v)", layers[0], err)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Layers[0].Annotations[cosignlayout.AnnotationSignature])
	if err != nil || !ed25519.Verify(pub, layers[0], sig) {
		t.Fatalf("the .sig layer's signature does not verify under the key (%v)", err)
	}

	_, am, alayers := readTag(t, ctx, repo, cosignlayout.Tag(md.Digest, cosignlayout.AttSuffix))
	if len(am.Layers) != 1 || am.Layers[0].MediaType != cosignlayout.DSSEMediaType ||
		am.Layers[0].Annotations[cosignlayout.AnnotationPredicateType] != attest.SLSAProvenanceV1 {
		t.Fatalf(".att layers %+v", am.Layers)
	}
	var env cosignlayout.Envelope
	if err := json.Unmarshal(alayers[0], &env); err != nil || len(env.Signatures) != 1 {
		t.Fatalf("envelope %s (%v)", alayers[0], err)
	}
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	esig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	pae := []byte("DSSEv1 " + itoa(len(env.PayloadType)) + " " + env.PayloadType + " " + itoa(len(payload)) + " " + string(payload))
	if env.PayloadType != attest.PayloadType || !ed25519.Verify(pub, pae, esig) {
		t.Fatal("the .att envelope does not verify under the key")
	}

	// Again with the same key: the same manifest.
	if _, err := ocisign.Sign(ctx, repo, md, ocisign.ArtifactType, "", key); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := readTag(t, ctx, repo, sigTag); d.Digest != sd.Digest {
		t.Fatalf("signing again changed %s: %s -> %s", sigTag, sd.Digest, d.Digest)
	}
	// Another key: a second layer, the first kept.
	_, key2, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := ocisign.Sign(ctx, repo, md, ocisign.ArtifactType, "", key2); err != nil {
		t.Fatal(err)
	}
	if _, m2, _ := readTag(t, ctx, repo, sigTag); len(m2.Layers) != 2 || m2.Layers[0].Digest != m.Layers[0].Digest {
		t.Fatalf("after a second key: %+v", m2.Layers)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A copy with referrers carries the root's cosign tags into the
// destination (a real registry, which has no referrers API), and a
// second copy finds them there and moves nothing; a copy without
// referrers leaves them out.
func TestCopyCarriesCosignTags(t *testing.T) {
	ctx := t.Context()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	src, md := signed(t, key)
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	dst, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "install/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	bare, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "install/bare", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := ocicopy.Copy(ctx, src, bare, md.Digest, ocicopy.Options{NoReferrers: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Resolve(ctx, cosignlayout.Tag(md.Digest, cosignlayout.SigSuffix)); err == nil {
		t.Fatal("a copy without referrers carried the .sig tag")
	}
	if _, err := ocicopy.Copy(ctx, src, dst, md.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{cosignlayout.SigSuffix, cosignlayout.AttSuffix} {
		tag := cosignlayout.Tag(md.Digest, suffix)
		want, _, _ := readTag(t, ctx, src, tag)
		got, _, _ := readTag(t, ctx, dst, tag)
		if got.Digest != want.Digest {
			t.Fatalf("%s in the destination: %s, want %s", tag, got.Digest, want.Digest)
		}
	}
	p, err := ocicopy.PlanCopy(ctx, src, dst, md.Digest, ocicopy.Options{})
	if err != nil || !p.UpToDate() {
		t.Fatalf("second copy: up to date %v (%v), missing %+v", p != nil && p.UpToDate(), err, p.Missing())
	}
	// A second key signs in the source: the next copy moves the new
	// .sig manifest and points the tag at it.
	_, key2, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := ocisign.Sign(ctx, src, md, ocisign.ArtifactType, "", key2); err != nil {
		t.Fatal(err)
	}
	if _, err := ocicopy.Copy(ctx, src, dst, md.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, m, _ := readTag(t, ctx, dst, cosignlayout.Tag(md.Digest, cosignlayout.SigSuffix)); len(m.Layers) != 2 {
		t.Fatalf("the destination's .sig has %d layers after the re-copy, want 2", len(m.Layers))
	}
}
