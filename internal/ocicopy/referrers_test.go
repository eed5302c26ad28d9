package ocicopy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// An install's copy (Options.RefuseImageReferrers) carries an artifact's
// signatures, attestations and SBOMs, never an image beside it: a
// referrer that is a container image (a filesystem layer), or a cosign
// tag naming one, would reach the install registry unchecked (the
// supply-chain policy checks the root), from where a cluster could pull
// it by digest. Such a copy is refused before anything is written,
// naming the referrer or tag and its layer; a copy without the option
// (the vendor's side) still carries it.
func TestImageReferrersRefused(t *testing.T) {
	ctx := context.Background()
	srcReg, dstReg := registries(t)
	refuse := ocicopy.Options{RefuseImageReferrers: true}

	// A root with a signature only: copied.
	src := open(t, srcReg.URL(), "acme/signed", srcCreds)
	root, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 1, Layers: []int64{4096}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocitest.Artifact(ctx, src, root, "application/vnd.example.signature", []byte("signed")); err != nil {
		t.Fatal(err)
	}
	dst := open(t, dstReg.URL(), "acme/signed", dstCreds)
	if _, err := ocicopy.Copy(ctx, src, dst, root.Digest, refuse); err != nil {
		t.Fatalf("a root with a signature: %v", err)
	}

	// A root with a runnable image as a referrer.
	src = open(t, srcReg.URL(), "acme/smuggler", srcCreds)
	root, err = ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 2, Layers: []int64{4096}})
	if err != nil {
		t.Fatal(err)
	}
	smuggled, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 98, Layers: []int64{8192}, Gzip: true, Subject: &root})
	if err != nil {
		t.Fatal(err)
	}
	layer := ocitest.Blob{Seed: 99, Size: 8192, Gzip: true}.Descriptor()
	checkRefused := func(name string, src *ocicopy.Repo, root digest.Digest, want ...string) {
		t.Helper()
		dst := open(t, "oci:"+t.TempDir(), "install/x", ocicopy.Credentials{})
		_, err := ocicopy.Copy(ctx, src, dst, root, refuse)
		for _, w := range append(want, layer.Digest.String(), ocispec.MediaTypeImageLayerGzip, "never an image nobody checked") {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %v, want an error saying %q", name, err, w)
			}
		}
		if ok, err := dst.Exists(ctx, ocispec.Descriptor{Digest: root, MediaType: ocispec.MediaTypeImageManifest}); ok || err != nil {
			t.Fatalf("%s: the destination holds the root (%v)", name, err)
		}
		// The vendor's side copies it as it is.
		if _, err := ocicopy.Copy(ctx, src, open(t, "oci:"+t.TempDir(), "vendor/x", ocicopy.Credentials{}), root, ocicopy.Options{}); err != nil {
			t.Fatalf("%s without the option: %v", name, err)
		}
	}
	checkRefused("an image as a referrer", src, root.Digest, "referrer "+smuggled.Digest.String()+" of "+root.Digest.String())

	// A cosign tag naming a runnable image.
	src = open(t, srcReg.URL(), "acme/tagged", srcCreds)
	root, err = ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 3, Layers: []int64{4096}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := ocitest.Image(ctx, src, ocitest.ImageSpec{Seed: 98, Layers: []int64{8192}, Gzip: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Tag(ctx, img, ocicopy.CosignTag(root.Digest, ".sig")); err != nil {
		t.Fatal(err)
	}
	checkRefused("a cosign tag naming an image", src, root.Digest, "tag "+ocicopy.CosignTag(root.Digest, ".sig"))
}
