// Package cosigntest runs the real cosign CLI (sigstore/cosign, built by
// .ci/run from tools/cosign into .cache/cosign) in tests, and makes what
// those tests verify: a public key's PEM file, an image signed and
// attested by byoc. Test code only: no binary links it
// (internal/archcheck).
package cosigntest

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// Version is the cosign CLI the compatibility tests run: built from the
// Go module proxy by .ci/run from tools/cosign (its own module, pinned
// there) into .cache/cosign/cosign-<version>.
const Version = "v2.5.0"

// Binary finds the cosign CLI: $BYOC_COSIGN, else .ci/run's build in the
// repository's .cache. It skips the test without one, except under
// CI=true, where it fails.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("BYOC_COSIGN")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), ".cache", "cosign", "cosign-"+Version)
	}
	if _, err := os.Stat(bin); err != nil {
		const how = "(cd tools/cosign && go build -o ../../.cache/cosign/cosign-" + Version + " github.com/sigstore/cosign/v2/cmd/cosign); .ci/run does"
		if os.Getenv("CI") == "true" {
			t.Fatalf("cosign CLI missing at %s: %s", bin, how)
		}
		t.Skipf("cosign CLI missing at %s: %s", bin, how)
	}
	return bin
}

// repoRoot is the directory of the repository's go.mod, above the test's
// working directory (its package's).
func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "tools", "cosign", "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no repository root (with tools/cosign) above %s", dir)
		}
	}
}

// Runner runs the cosign CLI bin with no sigstore public-good state: a
// private TUF root and home in dir; each run is bounded to two minutes.
func Runner(ctx context.Context, bin, dir string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"), "SIGSTORE_NO_CACHE=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// PublicKeyPEM writes pub as a PEM "PUBLIC KEY" (what `cosign verify
// --key` reads) to dir/name and returns its path.
func PublicKeyPEM(t testing.TB, dir, name string, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SignedImage pushes an image of one layer of layerSize random bytes
// (seed) to repo, signs it (ocisign.Sign) and attests its SLSA
// provenance (attest.Attach) with key, as the build agent does, and
// returns its descriptor.
func SignedImage(t testing.TB, ctx context.Context, repo *ocicopy.Repo, seed uint64, layerSize int64, key crypto.Signer) ocispec.Descriptor {
	t.Helper()
	md, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed, Layers: []int64{layerSize}})
	if err != nil {
		t.Fatal(err)
	}
	md.Platform = nil
	if _, err := ocisign.Sign(ctx, repo, md, ocisign.ArtifactType, "", key); err != nil {
		t.Fatal(err)
	}
	st, err := attest.NewStatement(repo.Name(), md.Digest, attest.SLSAProvenanceV1, map[string]any{"buildDefinition": map[string]any{"buildType": attest.BuildType}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.Attach(ctx, repo, md, st, key); err != nil {
		t.Fatal(err)
	}
	return md
}
