package cosignlayout_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// CosignVersion is the cosign CLI the compatibility test runs: built
// from the Go module proxy by .ci/run from tools/cosign (its own
// module, pinned there) into .cache/cosign/cosign-<version>.
const CosignVersion = "v2.5.0"

// cosignBinary finds the cosign CLI: $BYOC_COSIGN, else .ci/run's build.
// It skips the test without one, except under CI=true, where it fails.
func cosignBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("BYOC_COSIGN")
	if bin == "" {
		bin, _ = filepath.Abs(filepath.Join("..", "..", ".cache", "cosign", "cosign-"+CosignVersion))
	}
	if _, err := os.Stat(bin); err != nil {
		const how = "(cd tools/cosign && go build -o ../../.cache/cosign/cosign-" + CosignVersion + " github.com/sigstore/cosign/v2/cmd/cosign); .ci/run does"
		if os.Getenv("CI") == "true" {
			t.Fatalf("cosign CLI missing at %s: %s", bin, how)
		}
		t.Skipf("cosign CLI missing at %s: %s", bin, how)
	}
	return bin
}

// The real cosign CLI (sigstore/cosign, not byoc's code) verifies what
// the build agent signs: an image signed (ocisign.Sign) and attested
// (attest.Attach, SLSA provenance) in a vendor registry (Debian's
// docker-registry 2.8, no referrers API), copied by the custody copy
// (ocicopy.Copy) into an install registry, passes `cosign verify --key`
// and `cosign verify-attestation --key` in both (cosign's .sig and .att
// tags), and `cosign verify-attestation --new-bundle-format --key` (the
// Sigstore bundle referrers), with the tlog check off (byoc's keyed
// signatures are not in a transparency log); under another key each is
// refused.
func TestCosignCLIVerifies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts registries and runs the cosign CLI")
	}
	cosign := cosignBinary(t)
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	keyFile := func(name string, k ed25519.PublicKey) string {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	vendorKey, otherKey := keyFile("vendor.pub", pub), keyFile("other.pub", otherPub)

	vendorReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	vendor, err := ocicopy.Open(ctx, ocicopy.Registry{Host: vendorReg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	md, err := ocitest.Image(ctx, vendor, ocitest.ImageSpec{Seed: 11, Layers: []int64{256}})
	if err != nil {
		t.Fatal(err)
	}
	md.Platform = nil
	if _, err := ocisign.Sign(ctx, vendor, md, ocisign.ArtifactType, "", key); err != nil {
		t.Fatal(err)
	}
	st, err := attest.NewStatement("acme/web", md.Digest, attest.SLSAProvenanceV1, map[string]any{"buildDefinition": map[string]any{"buildType": attest.BuildType}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.Attach(ctx, vendor, md, st, key); err != nil {
		t.Fatal(err)
	}
	install, err := ocicopy.Open(ctx, ocicopy.Registry{Host: installReg.Host, PlainHTTP: true}, "install/acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer install.Close()
	if _, err := ocicopy.Copy(ctx, vendor, install, md.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cosign, args...)
		// No sigstore public-good state: a private TUF root and home.
		cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"), "SIGSTORE_NO_CACHE=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	flags := []string{"--insecure-ignore-tlog=true", "--allow-http-registry=true", "--allow-insecure-registry=true"}
	// cosign's bundle path: the Sigstore bundles attest.Attach attaches
	// as OCI 1.1 referrers (found through the referrers tag sha256-<hex>)
	// verify with --new-bundle-format; its trusted root is empty, since
	// the key is given and there is no transparency log.
	emptyRoot := filepath.Join(dir, "trusted_root.json")
	if err := os.WriteFile(emptyRoot, []byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bundleFlags := append([]string{"--new-bundle-format", "--trusted-root", emptyRoot, "--type", "slsaprovenance1"}, flags...)
	for _, ref := range []string{vendorReg.Host + "/acme/web@" + md.Digest.String(), installReg.Host + "/install/acme/web@" + md.Digest.String()} {
		out, err := run(append([]string{"verify", "--key", vendorKey}, append(flags, ref)...)...)
		if err != nil || !strings.Contains(out, md.Digest.String()) {
			t.Fatalf("cosign verify --key %s: %v\n%s", ref, err, out)
		}
		out, err = run(append([]string{"verify-attestation", "--key", vendorKey, "--type", "slsaprovenance1"}, append(flags, ref)...)...)
		if err != nil || !attestsProvenance(out, md.Digest.Encoded()) {
			t.Fatalf("cosign verify-attestation --key %s: %v\n%s", ref, err, out)
		}
		out, err = run(append([]string{"verify-attestation", "--key", vendorKey}, append(bundleFlags, ref)...)...)
		if err != nil || !strings.Contains(out, "The signatures were verified against the specified public key") {
			t.Fatalf("cosign verify-attestation --new-bundle-format --key %s: %v\n%s", ref, err, out)
		}
		if out, err := run(append([]string{"verify-attestation", "--key", otherKey}, append(bundleFlags, ref)...)...); err == nil {
			t.Fatalf("cosign verify-attestation --new-bundle-format under another key passed for %s:\n%s", ref, out)
		}
		if out, err := run(append([]string{"verify", "--key", otherKey}, append(flags, ref)...)...); err == nil {
			t.Fatalf("cosign verify under another key passed for %s:\n%s", ref, out)
		}
		if out, err := run(append([]string{"verify-attestation", "--key", otherKey, "--type", "slsaprovenance1"}, append(flags, ref)...)...); err == nil {
			t.Fatalf("cosign verify-attestation under another key passed for %s:\n%s", ref, out)
		}
	}
}

// attestsProvenance reports whether cosign verify-attestation's output
// holds an envelope of SLSA provenance about the digest hex.
func attestsProvenance(out, hex string) bool {
	for _, line := range strings.Split(out, "\n") {
		var env cosignlayout.Envelope
		if json.Unmarshal([]byte(line), &env) != nil {
			continue
		}
		b, _ := base64.StdEncoding.DecodeString(env.Payload)
		var st attest.Statement
		if json.Unmarshal(b, &st) == nil && st.PredicateType == attest.SLSAProvenanceV1 &&
			len(st.Subject) == 1 && st.Subject[0].Digest["sha256"] == hex {
			return true
		}
	}
	return false
}

// CosignVersion is the version tools/cosign/go.mod pins (which .ci/run
// builds).
func TestCosignVersionPinned(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tools", "cosign", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "github.com/sigstore/cosign/v2 "+CosignVersion+" ") {
		t.Fatalf("tools/cosign/go.mod does not pin github.com/sigstore/cosign/v2 %s (CosignVersion)", CosignVersion)
	}
}
