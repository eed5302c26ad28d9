package registry_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/byoc-dev/byoc/imsd/registry"
)

// TestMintedTokenShape checks a minted token as distribution 2.8's
// token.Token parser reads it: a compact JWS of header
// {"alg":"ES256","typ":"JWT","x5c":[the signer's certificate]}, claims
// with aud a string and the access list, and an ES256 signature (R||S, 64
// bytes) that verifies with the key of the x5c certificate, checked by
// golang-jwt's parser, with the times and audience validated; a token
// changed in any part does not verify.
func TestMintedTokenShape(t *testing.T) {
	s, err := registry.LoadOrCreateSigner(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	sc, _ := registry.ParseScope("repository:acme/web:pull,push")
	tok, err := s.Mint("agent-7", []registry.Scope{sc}, now, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok.Token, ".")
	if len(parts) != 3 {
		t.Fatalf("token of %d parts", len(parts))
	}
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	block, _ := pem.Decode(s.CertificatePEM())
	wantHeader := `{"alg":"ES256","typ":"JWT","x5c":["` + base64.StdEncoding.EncodeToString(block.Bytes) + `"]}`
	if string(hb) != wantHeader {
		t.Fatalf("header %s\nwant   %s", hb, wantHeader)
	}
	var claims map[string]any
	if err := json.Unmarshal(cb, &claims); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"iss": "byoc-imsd", "sub": "agent-7", "aud": "byoc-registry",
		"iat": float64(now.Unix()), "nbf": float64(now.Unix() - 60), "exp": float64(now.Unix() + 300), "jti": tok.ID,
		"access": []any{map[string]any{"type": "repository", "name": "acme/web", "actions": []any{"pull", "push"}}}}
	if g, w := mustJSON(t, claims), mustJSON(t, want); g != w {
		t.Fatalf("claims %s\nwant   %s", g, w)
	}
	if len(sig) != 64 {
		t.Fatalf("signature of %d bytes, want R||S of 64", len(sig))
	}

	keyFromX5C := func(tk *jwt.Token) (any, error) {
		x5c, _ := tk.Header["x5c"].([]any)
		der, err := base64.StdEncoding.DecodeString(x5c[0].(string))
		if err != nil {
			return nil, err
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		return c.PublicKey, nil
	}
	parse := func(token string) error {
		_, err := jwt.Parse(token, keyFromX5C, jwt.WithValidMethods([]string{"ES256"}), jwt.WithAudience("byoc-registry"),
			jwt.WithIssuer(registry.Issuer), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(func() time.Time { return now }))
		return err
	}
	if err := parse(tok.Token); err != nil {
		t.Fatalf("the minted token does not verify: %v", err)
	}
	flip := func(part int) string {
		p := append([]string{}, parts...)
		b, _ := base64.RawURLEncoding.DecodeString(p[part])
		b[len(b)/2] ^= 1
		p[part] = base64.RawURLEncoding.EncodeToString(b)
		return strings.Join(p, ".")
	}
	for i, name := range []string{"header", "claims", "signature"} {
		if err := parse(flip(i)); err == nil {
			t.Fatalf("a token with its %s changed verifies", name)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestES256Vector checks golang-jwt's ES256 against RFC 7515 appendix
// A.3: the example JWS verifies with the example key, and a changed
// payload does not.
func TestES256Vector(t *testing.T) {
	const jws = "eyJhbGciOiJFUzI1NiJ9" +
		".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ" +
		".DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
	coord := func(s string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The uncompressed point 0x04 || X || Y of RFC 7515 A.3's key.
	raw := append([]byte{4}, coord("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU")...)
	raw = append(raw, coord("x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0")...)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		t.Fatalf("RFC 7515 A.3's key: %v", err)
	}
	i := strings.LastIndexByte(jws, '.')
	sig, _ := base64.RawURLEncoding.DecodeString(jws[i+1:])
	if err := jwt.SigningMethodES256.Verify(jws[:i], sig, pub); err != nil {
		t.Fatalf("RFC 7515 A.3 does not verify: %v", err)
	}
	if err := jwt.SigningMethodES256.Verify(strings.Replace(jws[:i], ".eyJpc3Mi", ".eyJpc3Ni", 1), sig, pub); err == nil {
		t.Fatal("a changed payload verifies")
	}
}

// The registry token key mints tokens the vendor registry takes: imsd
// refuses one others may read, as it refuses such a job signing key,
// naming the file.
func TestSignerKeyReadableByOthersIsRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := registry.LoadOrCreateSigner(dir, ""); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "registry-token.key")
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a new key's mode: %v %v", fi.Mode(), err)
	}
	if _, err := registry.LoadOrCreateSigner(dir, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err := registry.LoadOrCreateSigner(dir, "")
	if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key others may read: %v", err)
	}
}
