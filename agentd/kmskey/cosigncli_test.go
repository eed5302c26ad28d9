package kmskey

import (
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/internal/cosignlayout/cosigntest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// The real cosign CLI verifies, with `cosign verify --key` and `cosign
// verify-attestation --key`, an image signed and attested through an AWS
// KMS key (awsfake.KMS, the real kms client), under the PEM of the
// public key KMS GetPublicKey gives (what `aws kms get-public-key`
// prints, base64 of the same DER); under another key both are refused.
func TestCosignCLIVerifiesKMSSignature(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a registry and runs the cosign CLI")
	}
	bin := cosigntest.Binary(t)
	ctx := t.Context()
	fake := awsfake.NewKMS(t)
	fk, other := fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY"), fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY")
	key, err := Open(ctx, "awskms://"+fake.Endpoint()+"/"+fk.ARN, Options{Credentials: creds, HTTPClient: fake.Server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kmsPub, otherPub := cosigntest.PublicKeyPEM(t, dir, "kms.pub", key.Public()), cosigntest.PublicKeyPEM(t, dir, "other.pub", other.Signer.Public())

	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	md := cosigntest.SignedImage(t, ctx, repo, 7, 128, key)
	run := cosigntest.Runner(ctx, bin, dir)
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
