package attest_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore-go/pkg/bundle"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/attest/keylesstest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

const buildAgent = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"

func TestKeylessSignVerify(t *testing.T) {
	e := keylesstest.New(t, 0)
	md := digest.FromString("artifact")
	bb := e.Sign(t, buildAgent, md)
	good := attest.Identity{Issuer: e.Issuer.URL, Subject: `https://kubernetes\.io/namespaces/byoc/serviceaccounts/.*`}
	// The customer's trusted root, as the trusted_root.json file they keep.
	rj, err := e.Root(t, e.FulcioCA).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(rootFile, rj, 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := attest.LoadTrustedRoot(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := attest.VerifyKeyless(bb, md, tr, []attest.Identity{good})
	if err != nil {
		t.Fatalf("verify under a matching identity: %v", err)
	}
	if v.PredicateType != attest.SLSAProvenanceV1 || !strings.Contains(v.KeyID, buildAgent) {
		t.Fatalf("verified %+v", v)
	}

	refused := func(name string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, want)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	_, err = attest.VerifyKeyless(bb, md, e.Root(t, e.FulcioCA), []attest.Identity{{Issuer: e.Issuer.URL, Subject: `https://kubernetes\.io/namespaces/other/.*`}})
	refused("another subject", err, "the subject matches no trusted identity")
	_, err = attest.VerifyKeyless(bb, md, e.Root(t, e.FulcioCA), []attest.Identity{{Issuer: "https://token.actions.githubusercontent.com", Subject: ".*"}})
	refused("another issuer", err, "no trusted identity has that issuer")
	_, err = attest.VerifyKeyless(bb, md, e.Root(t, keylesstest.NewCA(t, "other CA")), []attest.Identity{good})
	refused("untrusted CA", err, "is not from a trusted certificate authority")
	other := e
	other.TSACA = keylesstest.NewCA(t, "other tsa")
	_, err = attest.VerifyKeyless(bb, md, other.Root(t, e.FulcioCA), []attest.Identity{good})
	refused("untrusted timestamp authority", err, "no RFC 3161 timestamp from a trusted timestamp authority")
	_, err = attest.VerifyKeyless(bb, digest.FromString("other"), e.Root(t, e.FulcioCA), []attest.Identity{good})
	refused("another artifact", err, "its subject is not the artifact")

	// The same bundle with its timestamps removed.
	var m map[string]any
	if err := json.Unmarshal(bb, &m); err != nil {
		t.Fatal(err)
	}
	delete(m["verificationMaterial"].(map[string]any), "timestampVerificationData")
	nots, _ := json.Marshal(m)
	_, err = attest.VerifyKeyless(nots, md, e.Root(t, e.FulcioCA), []attest.Identity{good})
	refused("no timestamp", err, "no RFC 3161 timestamp")
}

// A certificate whose validity ended before the timestamp is refused.
func TestKeylessTimestampOutsideValidity(t *testing.T) {
	e := keylesstest.New(t, -time.Hour)
	md := digest.FromString("artifact")
	bb := e.Sign(t, buildAgent, md)
	_, err := attest.VerifyKeyless(bb, md, e.Root(t, e.FulcioCA), []attest.Identity{{Issuer: e.Issuer.URL, Subject: buildAgent}})
	if err == nil || !strings.Contains(err.Error(), "is outside the certificate's validity") {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
}

// TestFindKeyless: keyless and keyed attestations of an artifact in a
// real registry are found and verified together; a keyless one counts
// only under a trusted identity and root.
func TestFindKeyless(t *testing.T) {
	ctx := t.Context()
	e := keylesstest.New(t, 0)
	reg := ocitest.StartRegistry(t, ocitest.RegistryOptions{})
	repo, err := ocicopy.Open(ctx, ocicopy.Registry{Host: reg.Host, PlainHTTP: true}, "acme/web", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	md, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 1, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(e.Sign(t, buildAgent, md.Digest)); err != nil {
		t.Fatal(err)
	}
	if _, err := attest.AttachBundle(ctx, repo, md, &bun, attest.SLSAProvenanceV1, buildAgent); err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	st, err := attest.NewStatement("acme/web", md.Digest, attest.SPDXPredicate, map[string]string{"spdxVersion": "SPDX-2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.Attach(ctx, repo, md, st, key); err != nil {
		t.Fatal(err)
	}
	trust := attest.Trust{Keys: []ed25519.PublicKey{pub}, Root: e.Root(t, e.FulcioCA),
		Identities: []attest.Identity{{Issuer: e.Issuer.URL, Subject: buildAgent}}}
	f, err := attest.FindTrusted(ctx, repo, md, trust)
	if err != nil || len(f.Verified) != 2 || len(f.Rejected) != 0 ||
		len(f.Has(attest.SLSAProvenanceV1)) != 1 || !strings.HasPrefix(f.Has(attest.SLSAProvenanceV1)[0].KeyID, "keyless:") {
		t.Fatalf("found %+v %v", f, err)
	}
	for name, tr := range map[string]attest.Trust{
		"keys only":      {Keys: trust.Keys},
		"other identity": {Keys: trust.Keys, Root: trust.Root, Identities: []attest.Identity{{Issuer: e.Issuer.URL, Subject: "other"}}},
	} {
		f, err := attest.FindTrusted(ctx, repo, md, tr)
		if err != nil || len(f.Verified) != 1 || f.Verified[0].PredicateType != attest.SPDXPredicate || len(f.Rejected) != 1 {
			t.Fatalf("%s: found %+v %v", name, f, err)
		}
		t.Logf("%s: %s", name, f.Rejected[0])
	}
}

func TestParseIdentity(t *testing.T) {
	id, err := attest.ParseIdentity("issuer=https://token.actions.githubusercontent.com,subject=https://github.com/acme/app/.*,x")
	if err != nil || id.Issuer != "https://token.actions.githubusercontent.com" || id.Subject != "https://github.com/acme/app/.*,x" {
		t.Fatalf("%+v %v", id, err)
	}
	for _, bad := range []string{"", "subject=x,issuer=y", "issuer=,subject=x", "issuer=x,subject=(", "issuer=x"} {
		if _, err := attest.ParseIdentity(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
