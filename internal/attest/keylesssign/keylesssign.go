// Package keylesssign signs in-toto statements keylessly
// (internal/attest's keyless verification says what counts): with an
// ephemeral key certified by a Fulcio-compatible CA for the workload
// identity whose OIDC token a file holds, and an RFC 3161 timestamp of
// the signature, as a Sigstore bundle. It is apart from internal/attest
// so that install agents, which only verify, do not link sigstore-go's
// signing clients.
package keylesssign

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/sign"

	"github.com/byoc-dev/byoc/internal/attest"
)

// Signer signs statements keylessly.
type Signer struct {
	// FulcioURL is the base URL of the Fulcio-compatible CA (its v2
	// API: POST {FulcioURL}/api/v2/signingCert).
	FulcioURL string
	// TSAURL is the full URL of the RFC 3161 timestamp authority.
	TSAURL string
	// TokenFile holds the workload identity's OIDC token; the platform
	// refreshes it, so it is read at every signature.
	TokenFile string
	// Transport, if set, carries the requests to the CA and the TSA.
	Transport http.RoundTripper
}

// Bundle signs st as a Sigstore bundle (v0.3): a DSSE envelope of the
// statement signed with a fresh ephemeral key, the CA's certificate for
// that key as verification material, and the TSA's RFC 3161 timestamp
// of the signature.
func (s Signer) Bundle(ctx context.Context, st attest.Statement) (*bundle.Bundle, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return s.sign(ctx, &sign.DSSEData{Data: body, PayloadType: attest.PayloadType})
}

// SignMessage signs msg itself (an artifact signature's payload, such
// as cosign's simple-signing payload of an image) as a Sigstore bundle
// (v0.3) whose content is a message signature: the message's SHA-256
// digest and its ECDSA P-256 signature by a fresh ephemeral key, with
// the CA's certificate for that key and the TSA's RFC 3161 timestamp
// of the signature's bytes (as cosign timestamps a signature). It also
// returns the chain the CA answered above the certificate
// (intermediates, then the root), which cosign's signature layer
// carries and the bundle does not.
func (s Signer) SignMessage(ctx context.Context, msg []byte) (*bundle.Bundle, []*x509.Certificate, error) {
	rec := &chainRecorder{next: s.Transport}
	if rec.next == nil {
		rec.next = http.DefaultTransport
	}
	s.Transport = rec
	bun, err := s.sign(ctx, &sign.PlainData{Data: msg})
	if err != nil {
		return nil, nil, err
	}
	vc, err := bun.VerificationContent()
	if err != nil {
		return nil, nil, err
	}
	certs, err := rec.chain()
	if err != nil {
		return nil, nil, fmt.Errorf("the CA's answer: %w", err)
	}
	if len(certs) == 0 || vc.Certificate() == nil || !certs[0].Equal(vc.Certificate()) {
		return nil, nil, errors.New("the CA's answer does not start with the bundle's certificate")
	}
	return bun, certs[1:], nil
}

func (s Signer) sign(ctx context.Context, content sign.Content) (*bundle.Bundle, error) {
	if s.FulcioURL == "" || s.TSAURL == "" || s.TokenFile == "" {
		return nil, errors.New("keyless signing needs a Fulcio URL, a timestamp authority URL and an OIDC token file")
	}
	tok, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the OIDC token: %w", err)
	}
	token := strings.TrimSpace(string(tok))
	if token == "" {
		return nil, fmt.Errorf("OIDC token file %s is empty", s.TokenFile)
	}
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		return nil, err
	}
	pb, err := sign.Bundle(content, kp, sign.BundleOptions{
		CertificateProvider:        sign.NewFulcio(&sign.FulcioOptions{BaseURL: strings.TrimSuffix(s.FulcioURL, "/"), Transport: s.Transport}),
		CertificateProviderOptions: &sign.CertificateProviderOptions{IDToken: token},
		TimestampAuthorities:       []*sign.TimestampAuthority{sign.NewTimestampAuthority(&sign.TimestampAuthorityOptions{URL: s.TSAURL, Transport: s.Transport})},
		Context:                    ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("keyless signing (CA %s, timestamp authority %s): %w", s.FulcioURL, s.TSAURL, err)
	}
	return bundle.NewBundle(pb)
}

// chainRecorder keeps the body of the CA's answer to the signing
// certificate request (sigstore-go's Fulcio client keeps only the
// certificate).
type chainRecorder struct {
	next http.RoundTripper
	body []byte
}

func (c *chainRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/api/v2/signingCert") {
		return resp, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	c.body = b
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// chain parses the recorded answer's certificates (Fulcio v2: the leaf
// first, then the chain up to the root).
func (c *chainRecorder) chain() ([]*x509.Certificate, error) {
	type chain struct {
		Chain struct {
			Certificates []string `json:"certificates"`
		} `json:"chain"`
	}
	var resp struct {
		Embedded chain `json:"signedCertificateEmbeddedSct"`
		Detached chain `json:"signedCertificateDetachedSct"`
	}
	if err := json.Unmarshal(c.body, &resp); err != nil {
		return nil, err
	}
	pems := resp.Embedded.Chain.Certificates
	if len(pems) == 0 {
		pems = resp.Detached.Chain.Certificates
	}
	var out []*x509.Certificate
	for _, p := range pems {
		for rest := []byte(p); ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, err
			}
			out = append(out, cert)
		}
	}
	return out, nil
}
