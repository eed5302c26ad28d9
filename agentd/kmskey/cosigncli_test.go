package kmskey

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
)

// cosignVersion is internal/cosignlayout's CosignVersion: the cosign CLI
// .ci/run builds into .cache/cosign.
const cosignVersion = "v2.5.0"

// The real cosign CLI verifies, with `cosign verify --key` and `cosign
// verify-attestation --key`, an image signed and attested through an AWS
// KMS key (awsfake.KMS, the real kms client), under the PEM of the
// public key KMS GetPublicKey gives (what `aws kms get-public-key`
// prints, base64 of the same DER); under another key both are refused.
func TestCosignCLIVerifiesKMSSignature(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a registry and runs the cosign CLI")
	}
	bin := os.Getenv("BYOC_COSIGN")
	if bin == "" {
		bin, _ = filepath.Abs(filepath.Join("..", "..", ".cache", "cosign", "cosign-"+cosignVersion))
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cosign CLI missing at %s (.ci/run builds it)", bin)
		}
		t.Skipf("cosign CLI missing at %s (.ci/run builds it)", bin)
	}
	ctx := t.Context()
	fake := awsfake.NewKMS(t)
	fk, other := fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY"), fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY")
	key, err := Open(ctx, "awskms://"+fake.Endpoint()+"/"+fk.ARN, Options{Credentials: creds, HTTPClient: fake.Server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pemFile := func(name string, pub any) string {
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
	kmsPub, otherPub := pemFile("kms.pub", key.Public()), pemFile("other.pub", other.Signer.Public())

	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	md, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 7, Layers: []int64{128}})
	if err != nil {
		t.Fatal(err)
	}
	md.Platform = nil
	if _, err := ocisign.Sign(ctx, repo, md, ocisign.ArtifactType, "", key); err != nil {
		t.Fatal(err)
	}
	st, err := attest.NewStatement("acme/web", md.Digest, attest.SLSAProvenanceV1, map[string]any{"buildDefinition": map[string]any{"buildType": attest.BuildType}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.Attach(ctx, repo, md, st, key); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"), "SIGSTORE_NO_CACHE=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ref := reg.Host + "/acme/web@" + md.Digest.String()
	flags := []string{"--insecure-ignore-tlog=true", "--allow-http-registry=true", "--allow-insecure-registry=true", ref}
	if out, err := run(append([]string{"verify", "--key", kmsPub}, flags...)...); err != nil || !strings.Contains(out, md.Digest.String()) {
		t.Fatalf("cosign verify --key: %v\n%s", err, out)
	}
	if out, err := run(append([]string{"verify-attestation", "--key", kmsPub, "--type", "slsaprovenance1"}, flags...)...); err != nil || !strings.Contains(out, "The signatures were verified against the specified public key") {
		t.Fatalf("cosign verify-attestation --key: %v\n%s", err, out)
	}
	if out, err := run(append([]string{"verify", "--key", otherPub}, flags...)...); err == nil {
		t.Fatalf("cosign verify under another key passed:\n%s", out)
	}
	if out, err := run(append([]string{"verify-attestation", "--key", otherPub, "--type", "slsaprovenance1"}, flags...)...); err == nil {
		t.Fatalf("cosign verify-attestation under another key passed:\n%s", out)
	}
}
