package agent

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/sigstore-go/pkg/bundle"

	"github.com/byoc-dev/byoc/agentd/permissions"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/attest/keylesstest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/plugins/sdk"
)

// TestSupplyChainKeyless: a provenance signed keylessly (a fake
// Fulcio-compatible CA's certificate for the build agent's workload
// identity, a fake TSA's RFC 3161 timestamp), in a real registry,
// satisfies require-attestation slsa-provenance under a policy trusting
// that identity and the CA and TSA's trusted root; under another
// subject, another issuer, a root with another CA, or no identity, the
// job is refused naming the artifact, its digest, the rule and why.
func TestSupplyChainKeyless(t *testing.T) {
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	ctx := t.Context()
	e := keylesstest.New(t, 0)
	env := map[string]string{VendorRegistryEnv: reg.Host, VendorPlainHTTPEnv: "1", VendorTokenEnv: "t"}
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
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
// only (no key) attaches its provenance signed keylessly, and an install
// agent's policy trusting its identity verifies it.
func TestBuildSignsKeylessly(t *testing.T) {
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	ctx := t.Context()
	e := keylesstest.New(t, 0)
	const subject = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"
	env := map[string]string{VendorRegistryEnv: reg.Host, VendorPlainHTTPEnv: "1", VendorTokenEnv: "t"}
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 7, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, KeylessSign: e.Signer(t, subject).Bundle}
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
}
