package cosignlayout_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/attest/keylesstest"
	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/cosignlayout/cosigntest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/internal/ocisign/ocikeyless"
)

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
	cosign := cosigntest.Binary(t)
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	vendorKey, otherKey := cosigntest.PublicKeyPEM(t, dir, "vendor.pub", pub), cosigntest.PublicKeyPEM(t, dir, "other.pub", otherPub)

	vendorReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	vendor, err := ocicopy.Open(ctx, ocicopy.Registry{Host: vendorReg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	md := cosigntest.SignedImage(t, ctx, vendor, 11, 256, key)
	install, err := ocicopy.Open(ctx, ocicopy.Registry{Host: installReg.Host, PlainHTTP: true}, "install/acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer install.Close()
	if _, err := ocicopy.Copy(ctx, vendor, install, md.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}

	run := cosigntest.Runner(ctx, cosign, dir)
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

// The real cosign CLI verifies the build agent's keyless signature of an
// artifact (ocikeyless.Sign: a fake Fulcio-compatible CA's certificate
// for the build agent's workload identity, a fake TSA's RFC 3161
// timestamp) in cosign's .sig tag, in the vendor registry and in an
// install registry the custody copy copied it into: `cosign verify`
// with the identity and issuer, the CA's root (--ca-roots), the TSA's
// chain (--timestamp-certificate-chain, --use-signed-timestamps), and
// neither transparency log nor SCT (none is used) passes; another
// identity, another issuer or another CA root is refused.
func TestCosignCLIVerifiesKeyless(t *testing.T) {
	if testing.Short() {
		t.Skip("starts registries and runs the cosign CLI")
	}
	cosign := cosigntest.Binary(t)
	ctx := t.Context()
	dir := t.TempDir()
	e := keylesstest.New(t, 0)
	const subject = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"
	vendorReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	installReg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	vendor, err := ocicopy.Open(ctx, ocicopy.Registry{Host: vendorReg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer vendor.Close()
	md, err := ocitest.Image(ctx, vendor, ocitest.ImageSpec{Seed: 12, Layers: []int64{256}})
	if err != nil {
		t.Fatal(err)
	}
	md.Platform = nil
	if _, err := ocikeyless.Sign(ctx, vendor, md, e.Signer(t, subject).SignMessage); err != nil {
		t.Fatal(err)
	}
	// The layer carries the CA's chain as the CA answered it (here its
	// root alone) and the timestamp in cosign's JSON.
	sig := sigLayers(t, vendor, md.Digest)
	if len(sig) != 1 || sig[0].Annotations[cosignlayout.AnnotationChain] != string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.FulcioCA.Cert.Raw})) ||
		!strings.HasPrefix(sig[0].Annotations[cosignlayout.AnnotationRFC3161Timestamp], `{"SignedRFC3161Timestamp":"`) ||
		!strings.HasPrefix(sig[0].Annotations[cosignlayout.AnnotationCertificate], "-----BEGIN CERTIFICATE-----") {
		t.Fatalf(".sig layers %+v", sig)
	}
	install, err := ocicopy.Open(ctx, ocicopy.Registry{Host: installReg.Host, PlainHTTP: true}, "install/acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer install.Close()
	if _, err := ocicopy.Copy(ctx, vendor, install, md.Digest, ocicopy.Options{}); err != nil {
		t.Fatal(err)
	}
	// byoc's own referrer came along too: the customer's agent verifies
	// it in the install registry.
	if by, err := ocisign.VerifyTrusted(ctx, install, md, ocisign.ArtifactType, "", "the artifact", nil,
		ocikeyless.Trust{Root: e.Root(t, e.FulcioCA), Identities: []attest.Identity{{Issuer: e.Issuer.URL, Subject: subject}}}); err != nil || by != "keyless:"+e.Issuer.URL+":"+subject {
		t.Fatalf("byoc's keyless signature in the install registry: %q %v", by, err)
	}
	pemFile := func(name string, certs ...*x509.Certificate) string {
		var b []byte
		for _, c := range certs {
			b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caRoots, otherRoots := pemFile("ca.pem", e.FulcioCA.Cert), pemFile("other-ca.pem", keylesstest.NewCA(t, "other CA").Cert)
	otherTSACA := keylesstest.NewCA(t, "other TSA")
	otherTSAServer, otherTSALeaf := keylesstest.FakeTSA(t, otherTSACA)
	otherTSAServer.Close()
	tsaChain, otherTSA := pemFile("tsa.pem", e.TSALeaf, e.TSACA.Cert), pemFile("other-tsa.pem", otherTSALeaf, otherTSACA.Cert)
	run := cosigntest.Runner(ctx, cosign, dir)
	flags := func(roots, tsa, identity, issuer string) []string {
		return []string{"verify", "--ca-roots", roots, "--timestamp-certificate-chain", tsa, "--use-signed-timestamps",
			"--certificate-identity-regexp", identity, "--certificate-oidc-issuer", issuer,
			"--insecure-ignore-tlog=true", "--insecure-ignore-sct=true", "--allow-http-registry=true", "--allow-insecure-registry=true"}
	}
	good := `^https://kubernetes\.io/namespaces/byoc/serviceaccounts/.*$`
	for _, ref := range []string{vendorReg.Host + "/acme/web@" + md.Digest.String(), installReg.Host + "/install/acme/web@" + md.Digest.String()} {
		out, err := run(append(flags(caRoots, tsaChain, good, e.Issuer.URL), ref)...)
		// The payload names the vendor registry's repository, where
		// the build agent signed.
		if err != nil || !strings.Contains(out, md.Digest.String()) || !strings.Contains(out, subject) ||
			!strings.Contains(out, `"docker-reference":"`+vendorReg.Host+`/acme/web"`) {
			t.Fatalf("cosign verify (keyless) %s: %v\n%s", ref, err, out)
		}
		for name, args := range map[string][]string{
			"another identity":            flags(caRoots, tsaChain, `^https://kubernetes\.io/namespaces/other/.*$`, e.Issuer.URL),
			"another issuer":              flags(caRoots, tsaChain, good, "https://token.actions.githubusercontent.com"),
			"another CA":                  flags(otherRoots, tsaChain, good, e.Issuer.URL),
			"another timestamp authority": flags(caRoots, otherTSA, good, e.Issuer.URL),
		} {
			if out, err := run(append(args, ref)...); err == nil {
				t.Fatalf("cosign verify (keyless) under %s passed for %s:\n%s", name, ref, out)
			} else {
				t.Logf("%s: %s", name, lastLine(out))
			}
		}
	}
}

// sigLayers are the layers of md's .sig tag in repo.
func sigLayers(t *testing.T, repo *ocicopy.Repo, md digest.Digest) []ocispec.Descriptor {
	t.Helper()
	d, err := repo.Resolve(t.Context(), cosignlayout.Tag(md, cosignlayout.SigSuffix))
	if err != nil {
		t.Fatal(err)
	}
	b, err := content.FetchAll(t.Context(), repo, d)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Layers
}

// lastLine is out's last non-empty line.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
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

// cosigntest.Version is the version tools/cosign/go.mod pins (which .ci/run
// builds).
func TestCosignVersionPinned(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tools", "cosign", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "github.com/sigstore/cosign/v2 "+cosigntest.Version+" ") {
		t.Fatalf("tools/cosign/go.mod does not pin github.com/sigstore/cosign/v2 %s (cosigntest.Version)", cosigntest.Version)
	}
}
