// Package registry is imsd's side of the vendor registry: the token server
// a distribution registry configured for token authentication sends its
// clients to (the Docker token specification), the registry tokens it
// mints (JWTs signed with an ECDSA P-256 key whose self-signed certificate
// is the registry's rootcertbundle, by github.com/golang-jwt/jwt/v5), and
// the scope grammar of both.
//
// imsd never talks to the registry itself: it only signs tokens that the
// registry verifies offline. Who may have which token is the caller's
// decision (agentapi's grants); this package only mints and parses.
package registry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/byoc-dev/byoc/internal/atomicfile"
)

// Issuer is the iss claim of every token imsd mints; the registry's
// auth.token.issuer must say the same.
const Issuer = "byoc-imsd"

// DefaultService is the registry's auth.token.service unless configured.
const DefaultService = "byoc-registry"

// Signer mints registry tokens.
type Signer struct {
	key  *ecdsa.PrivateKey
	cert []byte // DER
	// Service is the aud claim (the registry's auth.token.service).
	Service string
}

// LoadOrCreateSigner reads the token key and certificate from dir
// (registry-token.key, registry-token.crt), creating both at the first
// start. The certificate is what the registry's rootcertbundle names.
func LoadOrCreateSigner(dir, service string) (*Signer, error) {
	if service == "" {
		service = DefaultService
	}
	keyPath, certPath := filepath.Join(dir, "registry-token.key"), CertPath(dir)
	keyPEM, kerr := os.ReadFile(keyPath)
	certPEM, cerr := os.ReadFile(certPath)
	if errors.Is(kerr, os.ErrNotExist) && errors.Is(cerr, os.ErrNotExist) {
		return createSigner(keyPath, certPath, service)
	}
	if kerr != nil {
		return nil, fmt.Errorf("registry token key: %w", kerr)
	}
	if fi, err := os.Stat(keyPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("registry token key %s: mode %o lets others read it; chmod 600 it", keyPath, fi.Mode().Perm())
	}
	if cerr != nil {
		return nil, fmt.Errorf("registry token certificate: %w", cerr)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("registry token key %s: no PEM block", keyPath)
	}
	k, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("registry token key %s: %w", keyPath, err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil {
		return nil, fmt.Errorf("registry token certificate %s: no PEM block", certPath)
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("registry token certificate %s: %w", certPath, err)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&k.PublicKey) {
		return nil, fmt.Errorf("registry token certificate %s is not the key %s's", certPath, keyPath)
	}
	return &Signer{key: k, cert: cb.Bytes, Service: service}, nil
}

// CertPath is where LoadOrCreateSigner keeps the certificate in dir.
func CertPath(dir string) string { return filepath.Join(dir, "registry-token.crt") }

func createSigner(keyPath, certPath, service string) (*Signer, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: Issuer + " registry token signer"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(20, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, fmt.Errorf("write registry token key: %w", err)
	}
	if err := atomicfile.Write(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("write registry token certificate: %w", err)
	}
	return &Signer{key: k, cert: der, Service: service}, nil
}

// Token is a minted registry token.
type Token struct {
	Token    string
	IssuedAt time.Time
	Expires  time.Time
	// ID is the jti claim (audit records name it).
	ID string
}

// access is one entry of the token's access claim.
type access struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

// Mint signs a token for subject allowing exactly scopes, valid from now
// for ttl. The registry allows a request only if one of the scopes names
// its repository and action.
func (s *Signer) Mint(subject string, scopes []Scope, now time.Time, ttl time.Duration) (Token, error) {
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return Token{}, err
	}
	acc := make([]access, 0, len(scopes))
	for _, sc := range scopes {
		acc = append(acc, access{Type: sc.Type, Name: sc.Name, Actions: append([]string{}, sc.Actions...)})
	}
	// golang-jwt writes the JWS (RFC 7515) compact form: the header
	// {"alg":"ES256","typ":"JWT","x5c":[…]} (distribution 2.8 takes the
	// signing key from x5c and checks its chain against the
	// rootcertbundle), the claims as given (aud a string, as the Docker
	// token specification writes it), and R||S each 32 bytes.
	claims := jwt.MapClaims{
		"iss": Issuer, "sub": subject, "aud": s.Service,
		// The registry allows a minute of clock skew; so does nbf here.
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(ttl).Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(jti), "access": acc,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["x5c"] = []string{base64.StdEncoding.EncodeToString(s.cert)}
	signed, err := t.SignedString(s.key)
	if err != nil {
		return Token{}, fmt.Errorf("sign registry token: %w", err)
	}
	return Token{Token: signed, IssuedAt: now, Expires: now.Add(ttl), ID: claims["jti"].(string)}, nil
}

// CertificatePEM is the token certificate, for the registry's rootcertbundle.
func (s *Signer) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.cert})
}
