// Package keylesssign signs in-toto statements keylessly
// (internal/attest's keyless verification says what counts): with an
// ephemeral key certified by a Fulcio-compatible CA for the workload
// identity whose OIDC token a file holds, and an RFC 3161 timestamp of
// the signature, as a Sigstore bundle. It is apart from internal/attest
// so that install agents, which only verify, do not link sigstore-go's
// signing clients.
package keylesssign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// of the signature's bytes (as cosign timestamps a signature).
func (s Signer) SignMessage(ctx context.Context, msg []byte) (*bundle.Bundle, error) {
	return s.sign(ctx, &sign.PlainData{Data: msg})
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
