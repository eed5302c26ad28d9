package attest_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/digitorus/timestamp"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-24 * time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: c, key: key}
}

func (ca testCA) issue(t *testing.T, tmpl *x509.Certificate, pub crypto.PublicKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// oidcIssuer signs workload identity tokens with a test key.
type oidcIssuer struct {
	url string
	key *ecdsa.PrivateKey
}

func (o oidcIssuer) token(t *testing.T, subject string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: o.key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: o.url, Subject: subject, Audience: jwt.Audience{"sigstore"},
		IssuedAt: jwt.NewNumericDate(time.Now()), Expiry: jwt.NewNumericDate(time.Now().Add(10 * time.Minute))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeFulcio answers Fulcio's v2 signingCert API as sigstore-go's client
// calls it: it verifies the bearer token's signature against the OIDC
// issuer's key (go-oidc), the proof of possession of the key, and issues
// a code-signing certificate from ca whose SAN is the token's subject and
// whose issuer extension is the token's issuer. validity shifts the
// certificate's window (to make one that expired before the timestamp).
func fakeFulcio(t *testing.T, ca testCA, iss oidcIssuer, shift time.Duration) *httptest.Server {
	verifier := oidc.NewVerifier(iss.url, &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{iss.key.Public()}}, &oidc.Config{ClientID: "sigstore", SupportedSigningAlgs: []string{oidc.ES256}})
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v2/signingCert" {
			http.NotFound(w, r)
			return
		}
		idt, err := verifier.Verify(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var req struct {
			PublicKeyRequest struct {
				PublicKey struct {
					Content string `json:"content"`
				} `json:"publicKey"`
				ProofOfPossession string `json:"proofOfPossession"`
			} `json:"publicKeyRequest"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		blk, _ := pem.Decode([]byte(req.PublicKeyRequest.PublicKey.Content))
		if blk == nil {
			http.Error(w, "public key not PEM", http.StatusBadRequest)
			return
		}
		pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		pop, _ := base64.StdEncoding.DecodeString(req.PublicKeyRequest.ProofOfPossession)
		h := sha256.Sum256([]byte(idt.Subject))
		if ek, ok := pub.(*ecdsa.PublicKey); !ok || !ecdsa.VerifyASN1(ek, h[:], pop) {
			http.Error(w, "proof of possession does not verify", http.StatusBadRequest)
			return
		}
		ext, _ := asn1.MarshalWithParams(idt.Issuer, "utf8")
		now := time.Now().Add(shift)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()),
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(10 * time.Minute),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
			ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}, Value: ext}}}
		if u, err := parseURL(idt.Subject); err == nil {
			tmpl.URIs = append(tmpl.URIs, u)
		} else {
			tmpl.EmailAddresses = []string{idt.Subject}
		}
		leaf := ca.issue(t, tmpl, pub)
		pemOf := func(c *x509.Certificate) string {
			return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
		}
		var resp struct {
			SignedCertificateEmbeddedSct struct {
				Chain struct {
					Certificates []string `json:"certificates"`
				} `json:"chain"`
			} `json:"signedCertificateEmbeddedSct"`
		}
		resp.SignedCertificateEmbeddedSct.Chain.Certificates = []string{pemOf(leaf), pemOf(ca.cert)}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK) // sigstore-go v1.3.0 accepts 200 only
		_ = json.NewEncoder(w).Encode(resp)
	}))
}

// fakeTSA answers RFC 3161 requests (digitorus/timestamp), signing with
// a leaf of ca whose extended key usage is time stamping (critical).
func fakeTSA(t *testing.T, ca testCA) (*httptest.Server, *x509.Certificate) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	eku, _ := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 8}})
	leaf := ca.issue(t, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test TSA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 37}, Critical: true, Value: eku}}}, key.Public())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := timestamp.ParseRequest(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ts := timestamp.Timestamp{HashAlgorithm: req.HashAlgorithm, HashedMessage: req.HashedMessage, Time: time.Now(),
			Nonce: req.Nonce, Policy: asn1.ObjectIdentifier{1, 2, 3, 4, 1}, AddTSACertificate: req.Certificates,
			Certificates: []*x509.Certificate{ca.cert}}
		out, err := ts.CreateResponseWithOpts(leaf, key, crypto.SHA256)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/timestamp-reply")
		_, _ = w.Write(out)
	}))
	return srv, leaf
}

type keylessEnv struct {
	fulcioCA, tsaCA testCA
	tsaLeaf         *x509.Certificate
	iss             oidcIssuer
	fulcio, tsa     *httptest.Server
	tokenFile       string
}

func newKeylessEnv(t *testing.T, shift time.Duration) keylessEnv {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e := keylessEnv{fulcioCA: newCA(t, "test fulcio"), tsaCA: newCA(t, "test tsa"),
		iss: oidcIssuer{url: "https://oidc.build.example", key: key}}
	e.fulcio = fakeFulcio(t, e.fulcioCA, e.iss, shift)
	t.Cleanup(e.fulcio.Close)
	e.tsa, e.tsaLeaf = fakeTSA(t, e.tsaCA)
	t.Cleanup(e.tsa.Close)
	e.tokenFile = filepath.Join(t.TempDir(), "token")
	return e
}

func (e keylessEnv) root(t *testing.T, ca testCA) *root.TrustedRoot {
	t.Helper()
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01,
		[]root.CertificateAuthority{&root.FulcioCertificateAuthority{Root: ca.cert, URI: e.fulcio.URL}}, nil,
		[]root.TimestampingAuthority{&root.SigstoreTimestampingAuthority{Root: e.tsaCA.cert, Leaf: e.tsaLeaf, URI: e.tsa.URL}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func (e keylessEnv) sign(t *testing.T, subject string, md digest.Digest) []byte {
	t.Helper()
	if err := os.WriteFile(e.tokenFile, []byte(e.iss.token(t, subject)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := attest.NewStatement("vendor/app", md, attest.SLSAProvenanceV1, map[string]string{"buildType": attest.BuildType})
	if err != nil {
		t.Fatal(err)
	}
	bun, err := attest.KeylessSigner{FulcioURL: e.fulcio.URL, TSAURL: e.tsa.URL + "/api/v1/timestamp", TokenFile: e.tokenFile}.Bundle(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bun.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const buildAgent = "https://kubernetes.io/namespaces/byoc/serviceaccounts/build-agent"

func TestKeylessSignVerify(t *testing.T) {
	e := newKeylessEnv(t, 0)
	md := digest.FromString("artifact")
	bb := e.sign(t, buildAgent, md)
	good := attest.Identity{Issuer: e.iss.url, Subject: `https://kubernetes\.io/namespaces/byoc/serviceaccounts/.*`}
	// The customer's trusted root, as the trusted_root.json file they keep.
	rj, err := e.root(t, e.fulcioCA).MarshalJSON()
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
	_, err = attest.VerifyKeyless(bb, md, e.root(t, e.fulcioCA), []attest.Identity{{Issuer: e.iss.url, Subject: `https://kubernetes\.io/namespaces/other/.*`}})
	refused("another subject", err, "the subject matches no trusted identity")
	_, err = attest.VerifyKeyless(bb, md, e.root(t, e.fulcioCA), []attest.Identity{{Issuer: "https://token.actions.githubusercontent.com", Subject: ".*"}})
	refused("another issuer", err, "no trusted identity has that issuer")
	_, err = attest.VerifyKeyless(bb, md, e.root(t, newCA(t, "other CA")), []attest.Identity{good})
	refused("untrusted CA", err, "is not from a trusted certificate authority")
	other := e
	other.tsaCA = newCA(t, "other tsa")
	_, err = attest.VerifyKeyless(bb, md, other.root(t, e.fulcioCA), []attest.Identity{good})
	refused("untrusted timestamp authority", err, "no RFC 3161 timestamp from a trusted timestamp authority")
	_, err = attest.VerifyKeyless(bb, digest.FromString("other"), e.root(t, e.fulcioCA), []attest.Identity{good})
	refused("another artifact", err, "its subject is not the artifact")

	// The same bundle with its timestamps removed.
	var m map[string]any
	if err := json.Unmarshal(bb, &m); err != nil {
		t.Fatal(err)
	}
	delete(m["verificationMaterial"].(map[string]any), "timestampVerificationData")
	nots, _ := json.Marshal(m)
	_, err = attest.VerifyKeyless(nots, md, e.root(t, e.fulcioCA), []attest.Identity{good})
	refused("no timestamp", err, "no RFC 3161 timestamp")
}

// A certificate whose validity ended before the timestamp is refused.
func TestKeylessTimestampOutsideValidity(t *testing.T) {
	e := newKeylessEnv(t, -time.Hour)
	md := digest.FromString("artifact")
	bb := e.sign(t, buildAgent, md)
	_, err := attest.VerifyKeyless(bb, md, e.root(t, e.fulcioCA), []attest.Identity{{Issuer: e.iss.url, Subject: buildAgent}})
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
	e := newKeylessEnv(t, 0)
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
	if err := bun.UnmarshalJSON(e.sign(t, buildAgent, md.Digest)); err != nil {
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
	trust := attest.Trust{Keys: []ed25519.PublicKey{pub}, Root: e.root(t, e.fulcioCA),
		Identities: []attest.Identity{{Issuer: e.iss.url, Subject: buildAgent}}}
	f, err := attest.FindTrusted(ctx, repo, md, trust)
	if err != nil || len(f.Verified) != 2 || len(f.Rejected) != 0 ||
		len(f.Has(attest.SLSAProvenanceV1)) != 1 || !strings.HasPrefix(f.Has(attest.SLSAProvenanceV1)[0].KeyID, "keyless:") {
		t.Fatalf("found %+v %v", f, err)
	}
	for name, tr := range map[string]attest.Trust{
		"keys only":      {Keys: trust.Keys},
		"other identity": {Keys: trust.Keys, Root: trust.Root, Identities: []attest.Identity{{Issuer: e.iss.url, Subject: "other"}}},
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

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, errors.New("not a URL")
	}
	return u, nil
}
