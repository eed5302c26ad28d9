package ocisign_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// An artifact's signature verifies with its key, type and version only:
// a plugin release's signature (a type and a version) never passes for
// an artifact's, nor the reverse; signing twice adds no second referrer.
func TestSignVerifyDomains(t *testing.T) {
	ctx := t.Context()
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{LayoutRoot: t.TempDir()}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	md, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 1, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	md.Platform = nil
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	trusted := []ed25519.PublicKey{pub}
	if _, err := ocisign.Verify(ctx, repo, md, ocisign.ArtifactType, "", "web", trusted); !errors.Is(err, ocisign.ErrUnsigned) ||
		!strings.Contains(err.Error(), "it has no signature") {
		t.Fatalf("unsigned: %v", err)
	}
	// Signed as a plugin release: not an artifact signature.
	if _, err := ocisign.Sign(ctx, repo, md, "artifact", "oci", key); err != nil {
		t.Fatal(err)
	}
	if _, err := ocisign.Verify(ctx, repo, md, ocisign.ArtifactType, "", "web", trusted); !errors.Is(err, ocisign.ErrUnsigned) ||
		!strings.Contains(err.Error(), "does not match the artifact") {
		t.Fatalf("a plugin-style signature passed for an artifact's: %v", err)
	}
	for range 2 {
		if _, err := ocisign.Sign(ctx, repo, md, ocisign.ArtifactType, "", key); err != nil {
			t.Fatal(err)
		}
	}
	if id, err := ocisign.Verify(ctx, repo, md, ocisign.ArtifactType, "", "web", trusted); err != nil || id == "" {
		t.Fatalf("signed: %q %v", id, err)
	}
	if _, err := ocisign.Verify(ctx, repo, md, "kv", "1.0.0", "plugin kv 1.0.0", trusted); err == nil {
		t.Fatal("an artifact signature passed for a plugin release's")
	}
	refs, err := repo.Referrers(ctx, md, 10)
	if err != nil || len(refs) != 2 {
		t.Fatalf("referrers %d (%v), want 2 (one per distinct signature)", len(refs), err)
	}
}
