package attest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// TestEnvelope: a statement signed with a key verifies under that key
// only, about its subject only; the key id is agentproto.KeyID.
func TestEnvelope(t *testing.T) {
	ctx := t.Context()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	md := digest.FromString("artifact")
	st, err := NewStatement("acme/web", md, SLSAProvenanceV1, map[string]string{"a": "b"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := Envelope(ctx, st, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	v, err := VerifyEnvelope(ctx, b, md, []dsse.Verifier{signer{pub: other}, signer{pub: pub}})
	if err != nil || v.KeyID != agentproto.KeyID(pub) || v.PredicateType != SLSAProvenanceV1 || string(v.Statement.Predicate) != `{"a":"b"}` {
		t.Fatalf("%+v %v", v, err)
	}
	for _, c := range []struct {
		name string
		keys []dsse.Verifier
		md   digest.Digest
		want string
	}{
		{"other key", []dsse.Verifier{signer{pub: other}}, md, "not signed by a trusted key (signed by key(s) " + agentproto.KeyID(pub)},
		{"no key", nil, md, "no key is trusted"},
		{"other subject", []dsse.Verifier{signer{pub: pub}}, digest.FromString("x"), "its subject is not the artifact"},
	} {
		if _, err := VerifyEnvelope(ctx, b, c.md, c.keys); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	env.PayloadType = "text/plain"
	b, _ = json.Marshal(env)
	if _, err := VerifyEnvelope(ctx, b, md, []dsse.Verifier{signer{pub: pub}}); err == nil || !strings.Contains(err.Error(), "payload type") {
		t.Fatalf("payload type: %v", err)
	}
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
