package agent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/attest/keylesssign"
	"github.com/byoc-dev/byoc/internal/attest/keylesstest"
	"github.com/byoc-dev/byoc/internal/cosignlayout"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/internal/ocisign/ocikeyless"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// TestSupplyChainKeyless: a provenance signed keylessly (a fake
// Fulcio-compatible CA's certificate for the build agent's workload
// identity, a fake TSA's RFC 3161 timestamp), in a real registry,
// satisfies require-attestation slsa-provenance under a policy trusting
// that identity and the CA and TSA's trusted root; under another
// subject, another issuer, a root with another CA, or no identity, the
// job is refused naming the artifact, its digest, the rule and why.
func TestSupplyChainKeyless(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	e := keylesstest.New(t, 0)
	d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 1, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	const subject = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(e.Sign(t, subject, d.Digest)); err != nil {
		t.Fatal(err)
	}
	if _, err := attest.AttachBundle(ctx, repo, d, &bun, attest.SLSAProvenanceV1, subject); err != nil {
		t.Fatal(err)
	}
	rootJSON := func(ca keylesstest.CA) []byte {
		b, err := e.Root(t, ca).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	trusted, untrusted := rootJSON(e.FulcioCA), rootJSON(keylesstest.NewCA(t, "other CA"))
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host}
	var policy permissions.SupplyChainPolicy
	check := func() ([]ArtifactVerification, error) {
		j := Job{ID: "j1", Component: "net", ComponentType: "terraform", Operation: sdk.OpPlan, registryEnv: env,
			SupplyChain: func() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error) { return policy, nil, nil }}
		return r.checkSupplyChain(ctx, j, map[string]any{"module": "acme/web@" + d.Digest.String()}, func(int32, string) {})
	}
	rule := func(ids []string, root []byte) permissions.SupplyChainPolicy {
		return permissions.SupplyChainPolicy{RequireAttestations: []string{"slsa-provenance"}, Identities: ids, TrustedRoot: root}
	}
	good := "issuer=" + e.Issuer.URL + `,subject=https://kubernetes\.io/namespaces/byoc/serviceaccounts/.*`
	if err := rule([]string{good}, trusted).Check(); err != nil {
		t.Fatal(err)
	}
	policy = rule([]string{good}, trusted)
	if vs, err := check(); err != nil || len(vs) != 1 || vs[0].Verdict != VerdictVerified {
		t.Fatalf("keyless provenance under its identity: %v %+v", err, vs)
	}
	for _, c := range []struct {
		name   string
		policy permissions.SupplyChainPolicy
		want   string
	}{
		{"another subject", rule([]string{"issuer=" + e.Issuer.URL + ",subject=https://kubernetes\\.io/namespaces/other/.*"}, trusted), "the subject matches no trusted identity of that issuer"},
		{"another issuer", rule([]string{"issuer=https://token.actions.githubusercontent.com,subject=.*"}, trusted), "no trusted identity has that issuer"},
		{"untrusted CA", rule([]string{good}, untrusted), "is not from a trusted certificate authority"},
		{"keys only", rule(nil, nil), "signed keylessly, and no keyless identity is trusted"},
	} {
		policy = c.policy
		vs, err := check()
		if err == nil || len(vs) != 1 || vs[0].Verdict != VerdictRefused {
			t.Fatalf("%s: passed: %v %+v", c.name, err, vs)
		}
		for _, w := range []string{c.want, "rule require-attestation slsa-provenance", "acme/web@" + d.Digest.String()} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
	// An identity without a trusted root is a policy error.
	if err := rule([]string{good}, nil).Check(); err == nil || !strings.Contains(err.Error(), "trusted root") {
		t.Fatalf("identity without a root: %v", err)
	}
}

// TestBuildSignsKeylessly: a build agent configured for keyless signing
// only (no key) signs the artifact and attaches its provenance signed
// keylessly, and an install agent's policy trusting its identity
// verifies both.
func TestBuildSignsKeylessly(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	e := keylesstest.New(t, 0)
	const subject = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"
	d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 7, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, KeylessSign: e.Signer(t, subject)}
	out := map[string]string{"repository": "acme/web", "digest": d.Digest.String(), "source": "src/web:1", "source_digest": d.Digest.String()}
	if err := r.signBuild(ctx, Job{ID: "job-1", ComponentType: BuildType, Operation: sdk.OpApply, registryEnv: env,
		Config: map[string]any{"kind": "sync", "source": "src/web:1", "repository": "acme/web"}}, out, time.Now(), func(int32, string) {}); err != nil {
		t.Fatal(err)
	}
	if out["attestations"] != attest.SLSAProvenanceV1 || out["signed_by"] != "" {
		t.Fatalf("outputs %v", out)
	}
	f, err := attest.FindTrusted(ctx, repo, d, attest.Trust{Root: e.Root(t, e.FulcioCA),
		Identities: []attest.Identity{{Issuer: e.Issuer.URL, Subject: subject}}})
	if err != nil || len(f.Verified) != 1 || len(f.Rejected) != 0 || f.Verified[0].Statement.Subject[0].Name != "acme/web" {
		t.Fatalf("found %+v %v", f, err)
	}
	// The artifact itself is signed keylessly too.
	by, err := ocisign.VerifyTrusted(ctx, repo, d, ocisign.ArtifactType, "", "the artifact", nil,
		ocikeyless.Trust{Root: e.Root(t, e.FulcioCA), Identities: []attest.Identity{{Issuer: e.Issuer.URL, Subject: subject}}})
	if err != nil || by != "keyless:"+e.Issuer.URL+":"+subject {
		t.Fatalf("the artifact's keyless signature: %q %v", by, err)
	}
}

// TestSupplyChainKeylessSignature: require-signature is met by a keyless
// signature of the artifact (ocikeyless.Sign: a fake
// Fulcio-compatible CA's certificate for the build agent's identity, a
// fake TSA's RFC 3161 timestamp) in a real registry, under a policy
// that trusts only that identity and the CA and TSA's trusted root (no
// key). Another subject, another issuer, a root with another CA, a
// signature without a timestamp or timestamped outside its certificate's
// validity, a signature of another digest, or a policy trusting keys
// only: the job is refused naming the artifact, its digest, the rule
// and why, and the refusal is journalled. A keyed signature still
// meets the rule as before.
func TestSupplyChainKeylessSignature(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	e := keylesstest.New(t, 0)
	const subject = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"
	image := func(seed uint64) ocispec.Descriptor {
		d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: seed, Layers: []int64{64}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	signer := e.Signer(t, subject)
	signed := image(1)
	by, err := ocikeyless.Sign(ctx, repo, signed, signer.SignMessage)
	if err != nil || by != "keyless:"+e.Issuer.URL+":"+subject {
		t.Fatalf("signed by %q: %v", by, err)
	}
	// pushRaw pushes a keyless signature manifest of d as ocikeyless.Sign
	// lays it out, with the payload and bundle given.
	pushRaw := func(d ocispec.Descriptor, payload, bb []byte) {
		t.Helper()
		pd := content.NewDescriptorFromBytes(cosignlayout.SimpleSigningMediaType, payload)
		bd := content.NewDescriptorFromBytes(attest.BundleMediaType, bb)
		for _, l := range []struct {
			d ocispec.Descriptor
			b []byte
		}{{pd, payload}, {bd, bb}} {
			if err := repo.Push(ctx, l.d, bytes.NewReader(l.b)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ocisign.KeylessSignatureArtifactType,
			oras.PackManifestOptions{Subject: &ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}, Layers: []ocispec.Descriptor{pd, bd}}); err != nil {
			t.Fatal(err)
		}
	}
	signPayload := func(d digest.Digest, s keylesssign.Signer) ([]byte, map[string]any) {
		t.Helper()
		payload, err := cosignlayout.Payload(ocisign.ImageReference(repo), d)
		if err != nil {
			t.Fatal(err)
		}
		bun, _, err := s.SignMessage(ctx, payload)
		if err != nil {
			t.Fatal(err)
		}
		bb, _ := bun.MarshalJSON()
		var m map[string]any
		if err := json.Unmarshal(bb, &m); err != nil {
			t.Fatal(err)
		}
		return payload, m
	}
	// A signature of the digest of signed, attached to otherDigest.
	otherDigest := image(2)
	payload, m := signPayload(signed.Digest, signer)
	bb, _ := json.Marshal(m)
	pushRaw(otherDigest, payload, bb)
	// A signature of noTimestamp's digest, its timestamp removed.
	noTimestamp := image(3)
	payload, m = signPayload(noTimestamp.Digest, signer)
	delete(m["verificationMaterial"].(map[string]any), "timestampVerificationData")
	bb, _ = json.Marshal(m)
	pushRaw(noTimestamp, payload, bb)
	// A signature by a certificate whose validity ended before its
	// timestamp.
	late := keylesstest.New(t, -time.Hour)
	expired := image(4)
	if _, err := ocikeyless.Sign(ctx, repo, expired, late.Signer(t, subject).SignMessage); err != nil {
		t.Fatal(err)
	}
	// A keyed signature.
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	keyed := image(5)
	if _, err := ocisign.Sign(ctx, repo, keyed, ocisign.ArtifactType, "", key); err != nil {
		t.Fatal(err)
	}

	rootJSON := func(e keylesstest.Env, ca keylesstest.CA) []byte {
		b, err := e.Root(t, ca).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	trusted, untrusted := rootJSON(e, e.FulcioCA), rootJSON(e, keylesstest.NewCA(t, "other CA"))
	var journal []journalEntry
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, journal: func(kind, _ string, data map[string]string) {
		journal = append(journal, journalEntry{kind, data})
	}}
	var policy permissions.SupplyChainPolicy
	var keys []ed25519.PublicKey
	check := func(d ocispec.Descriptor) ([]ArtifactVerification, error) {
		j := Job{ID: "j1", Component: "web", ComponentType: "image", Operation: sdk.OpApply, registryEnv: env,
			SupplyChain: func() (permissions.SupplyChainPolicy, []ed25519.PublicKey, error) { return policy, keys, nil }}
		return r.checkSupplyChain(ctx, j, map[string]any{"source": "acme/web@" + d.Digest.String()}, func(int32, string) {})
	}
	rule := func(root []byte, ids ...string) permissions.SupplyChainPolicy {
		return permissions.SupplyChainPolicy{RequireSignature: true, Identities: ids, TrustedRoot: root}
	}
	good := "issuer=" + e.Issuer.URL + `,subject=https://kubernetes\.io/namespaces/byoc/serviceaccounts/.*`
	policy = rule(trusted, good)
	if err := policy.Check(); err != nil {
		t.Fatal(err)
	}
	if vs, err := check(signed); err != nil || len(vs) != 1 || vs[0].Verdict != VerdictVerified || vs[0].KeyID != by {
		t.Fatalf("keyless signature under its identity: %v %+v", err, vs)
	}
	if len(journal) != 1 || journal[0].kind != KindSupplyChainVerified || journal[0].data["key_id"] != by {
		t.Fatalf("journal %+v", journal)
	}
	// The keyed path, unchanged: a trusted key's signature meets the
	// rule, with or without identities.
	keys = []ed25519.PublicKey{pub}
	for _, p := range []permissions.SupplyChainPolicy{rule(nil), rule(trusted, good)} {
		policy = p
		if vs, err := check(keyed); err != nil || len(vs) != 1 || vs[0].Verdict != VerdictVerified || vs[0].KeyID != agentproto.KeyID(pub) {
			t.Fatalf("keyed signature: %v %+v", err, vs)
		}
	}
	keys = nil
	for _, c := range []struct {
		name   string
		d      ocispec.Descriptor
		policy permissions.SupplyChainPolicy
		want   string
	}{
		{"another subject", signed, rule(trusted, "issuer="+e.Issuer.URL+`,subject=https://kubernetes\.io/namespaces/other/.*`), "the subject matches no trusted identity of that issuer"},
		{"another issuer", signed, rule(trusted, "issuer=https://token.actions.githubusercontent.com,subject=.*"), "no trusted identity has that issuer"},
		{"another CA", signed, rule(untrusted, good), "is not from a trusted certificate authority"},
		{"keys only", signed, rule(nil), "signed keylessly, and no keyless identity is trusted"},
		{"another digest", otherDigest, rule(trusted, good), "it signs digest " + signed.Digest.String() + ", not the artifact's"},
		{"no timestamp", noTimestamp, rule(trusted, good), "no RFC 3161 timestamp"},
		{"timestamp outside the certificate's validity", expired, rule(rootJSON(late, late.FulcioCA), "issuer="+late.Issuer.URL+",subject="+subject), "is outside the certificate's validity"},
		{"keyed signature, no key", keyed, rule(trusted, good), "(not trusted)"},
	} {
		policy = c.policy
		journal = nil
		vs, err := check(c.d)
		if err == nil || len(vs) != 1 || vs[0].Verdict != VerdictRefused {
			t.Fatalf("%s: passed: %v %+v", c.name, err, vs)
		}
		for _, w := range []string{c.want, "rule require-signature", "acme/web@" + c.d.Digest.String(), "(digest " + c.d.Digest.String() + ")"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		if len(journal) != 1 || journal[0].kind != KindSupplyChainRefused || journal[0].data["rule"] != RuleRequireSignature ||
			journal[0].data["digest"] != c.d.Digest.String() || !strings.Contains(journal[0].data["reason"], c.want) {
			t.Errorf("%s: journal %+v", c.name, journal)
		}
		t.Logf("%s: %v", c.name, err)
	}
}
