// Package keylesstest is a keyless signing setup for tests, on loopback:
// a test OIDC issuer (tokens signed with a test key), a fake
// Fulcio-compatible CA (its v2 signingCert API, as sigstore-go's client
// calls it, verifying the token with go-oidc) and a fake RFC 3161
// timestamp authority (digitorus/timestamp).
package keylesstest

import (
	"crypto"
	"crypto/ecdsa"
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
	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/attest/keylesssign"
)

// CA is a certificate authority for tests.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

func NewCA(t *testing.T, name string) CA {
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
	return CA{Cert: c, Key: key}
}

func (ca CA) Issue(t *testing.T, tmpl *x509.Certificate, pub crypto.PublicKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// OIDCIssuer signs workload identity tokens with a test key.
type OIDCIssuer struct {
	URL string
	Key *ecdsa.PrivateKey
}

func (o OIDCIssuer) Token(t *testing.T, subject string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: o.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: o.URL, Subject: subject, Audience: jwt.Audience{"sigstore"},
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
// whose issuer extensions are the token's issuer. validity shifts the
// certificate's window (to make one that expired before the timestamp).
func FakeFulcio(t *testing.T, ca CA, iss OIDCIssuer, shift time.Duration) *httptest.Server {
	verifier := oidc.NewVerifier(iss.URL, &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{iss.Key.Public()}}, &oidc.Config{ClientID: "sigstore", SupportedSigningAlgs: []string{oidc.ES256}})
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
			// The issuer twice, as Fulcio writes it: the deprecated
			// raw string (1.1, the one cosign v2 reads) and the DER
			// UTF8String (1.8).
			ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}, Value: []byte(idt.Issuer)},
				{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}, Value: ext}}}
		if u, err := parseURL(idt.Subject); err == nil {
			tmpl.URIs = append(tmpl.URIs, u)
		} else {
			tmpl.EmailAddresses = []string{idt.Subject}
		}
		leaf := ca.Issue(t, tmpl, pub)
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
		resp.SignedCertificateEmbeddedSct.Chain.Certificates = []string{pemOf(leaf), pemOf(ca.Cert)}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK) // sigstore-go v1.3.0 accepts 200 only
		_ = json.NewEncoder(w).Encode(resp)
	}))
}

// fakeTSA answers RFC 3161 requests (digitorus/timestamp), signing with
// a leaf of ca whose extended key usage is time stamping (critical).
func FakeTSA(t *testing.T, ca CA) (*httptest.Server, *x509.Certificate) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	eku, _ := asn1.Marshal([]asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 8}})
	leaf := ca.Issue(t, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test TSA"},
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
			Certificates: []*x509.Certificate{ca.Cert}}
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

type Env struct {
	FulcioCA, TSACA CA
	TSALeaf         *x509.Certificate
	Issuer          OIDCIssuer
	Fulcio, TSA     *httptest.Server
	TokenFile       string
}

func New(t *testing.T, shift time.Duration) Env {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e := Env{FulcioCA: NewCA(t, "test fulcio"), TSACA: NewCA(t, "test tsa"),
		Issuer: OIDCIssuer{URL: "https://oidc.build.example", Key: key}}
	e.Fulcio = FakeFulcio(t, e.FulcioCA, e.Issuer, shift)
	t.Cleanup(e.Fulcio.Close)
	e.TSA, e.TSALeaf = FakeTSA(t, e.TSACA)
	t.Cleanup(e.TSA.Close)
	e.TokenFile = filepath.Join(t.TempDir(), "token")
	return e
}

func (e Env) Root(t *testing.T, ca CA) *root.TrustedRoot {
	t.Helper()
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01,
		[]root.CertificateAuthority{&root.FulcioCertificateAuthority{Root: ca.Cert, URI: e.Fulcio.URL}}, nil,
		[]root.TimestampingAuthority{&root.SigstoreTimestampingAuthority{Root: e.TSACA.Cert, Leaf: e.TSALeaf, URI: e.TSA.URL}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Signer writes a token of the issuer for subject into the token file
// and returns the keyless signer using the fake CA and TSA.
func (e Env) Signer(t *testing.T, subject string) keylesssign.Signer {
	t.Helper()
	if err := os.WriteFile(e.TokenFile, []byte(e.Issuer.Token(t, subject)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keylesssign.Signer{FulcioURL: e.Fulcio.URL, TSAURL: e.TSA.URL + "/api/v1/timestamp", TokenFile: e.TokenFile}
}

// Sign signs a provenance statement about md keylessly as subject and
// returns the bundle's JSON.
func (e Env) Sign(t *testing.T, subject string, md digest.Digest) []byte {
	t.Helper()
	signer := e.Signer(t, subject)
	st, err := attest.NewStatement("vendor/app", md, attest.SLSAProvenanceV1, map[string]string{"buildType": attest.BuildType})
	if err != nil {
		t.Fatal(err)
	}
	bun, err := signer.Bundle(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bun.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, errors.New("not a URL")
	}
	return u, nil
}
