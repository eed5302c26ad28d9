package attest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// TestBundle: a statement signed with a key is a Sigstore bundle that
// sigstore-go verifies under that key only, about its subject only; a
// tampered payload is refused; the key id is agentproto.KeyID.
func TestBundle(t *testing.T) {
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	md := digest.FromString("artifact")
	st, err := NewStatement("acme/web", md, SLSAProvenanceV1, map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	bun, err := Bundle(ctx, st, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := bun.MarshalJSON()
	if !strings.Contains(string(b), BundleMediaType) {
		t.Fatalf("media type: %s", b)
	}
	v, err := VerifyBundle(b, md, TrustedMaterial([]ed25519.PublicKey{other, pub}))
	if err != nil || v.KeyID != agentproto.KeyID(pub) || v.PredicateType != SLSAProvenanceV1 || string(v.Statement.Predicate) != `{"a":"b"}` {
		t.Fatalf("%+v %v", v, err)
	}
	for _, c := range []struct {
		name string
		keys []ed25519.PublicKey
		md   digest.Digest
		want string
	}{
		{"other key", []ed25519.PublicKey{other}, md, "not signed by a trusted key (signed by key " + agentproto.KeyID(pub)},
		{"no key", nil, md, "not signed by a trusted key"},
		{"other subject", []ed25519.PublicKey{pub}, digest.FromString("x"), "its subject is not the artifact"},
	} {
		if _, err := VerifyBundle(b, c.md, TrustedMaterial(c.keys)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Signed by another key but naming the trusted key's id.
	forged, _ := Bundle(ctx, st, otherKey)
	forged.GetVerificationMaterial().GetPublicKey().Hint = agentproto.KeyID(pub)
	fb, _ := forged.MarshalJSON()
	if _, err := VerifyBundle(fb, md, TrustedMaterial([]ed25519.PublicKey{pub})); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("forged: %v", err)
	}
	// A tampered payload.
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	env := m["dsseEnvelope"].(map[string]any)
	tampered := strings.Replace(string(mustJSON(t, st)), `"a":"b"`, `"a":"c"`, 1)
	env["payload"] = base64.StdEncoding.EncodeToString([]byte(tampered))
	tb, _ := json.Marshal(m)
	if _, err := VerifyBundle(tb, md, TrustedMaterial([]ed25519.PublicKey{pub})); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("tampered: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCountAtLeast counts findings in Trivy's and Grype's reports.
func TestCountAtLeast(t *testing.T) {
	trivy := `{"scanner":{"result":{"Results":[{"Vulnerabilities":[{"Severity":"CRITICAL"},{"Severity":"HIGH"},{"Severity":"LOW"}]}]}}}`
	grype := `{"scanner":{"result":{"matches":[{"vulnerability":{"severity":"High"}},{"vulnerability":{"severity":"Medium"}}]}}}`
	for _, c := range []struct {
		pred, min string
		want      int
	}{{trivy, "critical", 1}, {trivy, "high", 2}, {trivy, "low", 3}, {grype, "critical", 0}, {grype, "HIGH", 1}, {grype, "medium", 2}} {
		if n, err := CountAtLeast(json.RawMessage(c.pred), c.min); err != nil || n != c.want {
			t.Errorf("%s %s: %d %v, want %d", c.pred, c.min, n, err, c.want)
		}
	}
	if _, err := CountAtLeast(json.RawMessage(`{"scanner":{}}`), "high"); err == nil || !strings.Contains(err.Error(), "no scanner.result") {
		t.Fatalf("no result: %v", err)
	}
	if _, err := CountAtLeast(json.RawMessage(trivy), "severe"); err == nil {
		t.Fatal("a bad severity was accepted")
	}
}

func TestSBOMPredicateOf(t *testing.T) {
	for in, want := range map[string]string{"sbom/web.spdx.json": SPDXPredicate, "application/spdx+json": SPDXPredicate,
		"x.cdx.json": CycloneDXPredicate, "bom.json": CycloneDXPredicate, "application/vnd.cyclonedx+json": CycloneDXPredicate, "main.tf": ""} {
		if got, _ := SBOMPredicateOf(in); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
