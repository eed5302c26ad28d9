package attest

// Keyless verification (signing: internal/attest/keylesssign): the build agent signs with an
// ephemeral key whose short-lived certificate a Fulcio-compatible CA
// issued for the agent's workload identity (an OIDC token the platform
// keeps in a file), and has the signature timestamped by an RFC 3161
// timestamp authority. No transparency log is involved: the timestamp
// is the evidence that the signature was made while the certificate was
// valid, so a verifier requires one from a timestamp authority its
// trusted root names.

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
)

// Identity is a keyless signer the customer trusts: the certificate's
// OIDC issuer, exactly, and its subject (the certificate's subject
// alternative name: a URI or an email), matched by a regular expression
// anchored at both ends.
type Identity struct {
	Issuer  string
	Subject string
}

func (id Identity) String() string { return "issuer=" + id.Issuer + ",subject=" + id.Subject }

// ParseIdentity parses "issuer=URL,subject=REGEX" (the subject comes
// last, so its expression may hold commas).
func ParseIdentity(s string) (Identity, error) {
	rest, ok := strings.CutPrefix(s, "issuer=")
	iss, subj, ok2 := strings.Cut(rest, ",subject=")
	if !ok || !ok2 || iss == "" || subj == "" {
		return Identity{}, fmt.Errorf("identity %q: want issuer=URL,subject=REGEX", s)
	}
	if _, err := regexp.Compile(anchor(subj)); err != nil {
		return Identity{}, fmt.Errorf("identity %q: subject: %w", s, err)
	}
	return Identity{Issuer: iss, Subject: subj}, nil
}

func anchor(re string) string { return "^(?:" + re + ")$" }

// LoadTrustedRoot reads a Sigstore trusted root (trusted_root.json, media
// type application/vnd.dev.sigstore.trustedroot+json;version=0.1): the
// certificate authorities whose certificates keyless signatures may
// carry, and the timestamp authorities whose timestamps count.
func LoadTrustedRoot(path string) (*root.TrustedRoot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trusted root: %w", err)
	}
	tr, err := ParseTrustedRoot(b)
	if err != nil {
		return nil, fmt.Errorf("trusted root %s: %w", path, err)
	}
	return tr, nil
}

// ParseTrustedRoot parses a trusted root's JSON; it must name at least
// one certificate authority and one timestamp authority.
func ParseTrustedRoot(b []byte) (*root.TrustedRoot, error) {
	tr, err := root.NewTrustedRootFromJSON(b)
	if err != nil {
		return nil, err
	}
	if len(tr.FulcioCertificateAuthorities()) == 0 {
		return nil, errors.New("no certificate authority")
	}
	if len(tr.TimestampingAuthorities()) == 0 {
		return nil, errors.New("no timestamp authority (keyless signatures are accepted only with an RFC 3161 timestamp)")
	}
	return tr, nil
}

// VerifyKeyless verifies the Sigstore bundle bb, a DSSE envelope of an
// in-toto statement about subject, signed keylessly: with sigstore-go's
// verifier, its certificate must chain to a certificate authority of tr
// at the time of at least one RFC 3161 timestamp from a timestamp
// authority of tr, and name one of ids. The error says which of these
// failed.
func VerifyKeyless(bb []byte, subject digest.Digest, tr root.TrustedMaterial, ids []Identity) (Verified, error) {
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(bb); err != nil {
		return Verified{}, fmt.Errorf("not a Sigstore bundle: %w", err)
	}
	env := bun.GetDsseEnvelope()
	if env == nil {
		return Verified{}, errors.New("not a DSSE envelope bundle")
	}
	if env.PayloadType != PayloadType {
		return Verified{}, fmt.Errorf("payload type %q, not %s", env.PayloadType, PayloadType)
	}
	raw, err := hex.DecodeString(subject.Encoded())
	if err != nil || subject.Validate() != nil {
		return Verified{}, fmt.Errorf("artifact digest %q", subject)
	}
	signer, err := verifyKeyless(&bun, tr, ids, verify.WithArtifactDigest(subject.Algorithm().String(), raw),
		"its subject is not the artifact "+subject.String())
	if err != nil {
		return Verified{}, err
	}
	var st Statement
	if err := json.Unmarshal(env.Payload, &st); err != nil {
		return Verified{}, fmt.Errorf("not an in-toto statement: %w", err)
	}
	if st.Type != StatementType && st.Type != "https://in-toto.io/Statement/v0.1" {
		return Verified{}, fmt.Errorf("statement type %q", st.Type)
	}
	return Verified{PredicateType: st.PredicateType, KeyID: signer, Statement: st}, nil
}

// VerifyKeylessMessage verifies the Sigstore bundle bb, a message
// signature of msg made keylessly, as VerifyKeyless does an envelope:
// under tr, at a trusted timestamp, by one of ids. It returns the
// signer, "keyless:ISSUER:SUBJECT".
func VerifyKeylessMessage(bb, msg []byte, tr root.TrustedMaterial, ids []Identity) (string, error) {
	var bun bundle.Bundle
	if err := bun.UnmarshalJSON(bb); err != nil {
		return "", fmt.Errorf("not a Sigstore bundle: %w", err)
	}
	if bun.GetMessageSignature() == nil {
		return "", errors.New("not a message signature bundle")
	}
	return verifyKeyless(&bun, tr, ids, verify.WithArtifact(bytes.NewReader(msg)), "it signs another message")
}

// verifyKeyless verifies bun, signed keylessly, against tr and ids and
// the artifact policy; otherArtifact is the error when the bundle
// verifies but is not of the artifact. It returns the signer's id.
func verifyKeyless(bun *bundle.Bundle, tr root.TrustedMaterial, ids []Identity, artifact verify.ArtifactPolicyOption, otherArtifact string) (string, error) {
	vc, err := bun.VerificationContent()
	if err != nil {
		return "", err
	}
	cert := vc.Certificate()
	if cert == nil {
		return "", errors.New("not signed keylessly (no certificate)")
	}
	if len(ids) == 0 {
		return "", errors.New("no identity is trusted")
	}
	if ts, err := bun.Timestamps(); err != nil || len(ts) == 0 {
		return "", errors.New("no RFC 3161 timestamp")
	}
	sum, err := certificate.SummarizeCertificate(cert)
	if err != nil {
		return "", fmt.Errorf("certificate: %w", err)
	}
	signer := fmt.Sprintf("issuer %s, subject %s", sum.Issuer, sum.SubjectAlternativeName)
	var opts []verify.PolicyOption
	issuerKnown, subjectKnown := false, false
	for _, id := range ids {
		ci, err := verify.NewShortCertificateIdentity(id.Issuer, "", "", anchor(id.Subject))
		if err != nil {
			return "", fmt.Errorf("identity %s: %w", id, err)
		}
		opts = append(opts, verify.WithCertificateIdentity(ci))
		if id.Issuer == sum.Issuer {
			issuerKnown = true
			if regexp.MustCompile(anchor(id.Subject)).MatchString(sum.SubjectAlternativeName) {
				subjectKnown = true
			}
		}
	}
	v, err := verify.NewVerifier(tr, verify.WithSignedTimestamps(1)) // NewSignedEntityVerifier, deprecated alias
	if err != nil {
		return "", err
	}
	if _, err := v.Verify(bun, verify.NewPolicy(artifact, opts...)); err != nil {
		switch {
		case !issuerKnown:
			return "", fmt.Errorf("signed by %s: no trusted identity has that issuer", signer)
		case !subjectKnown:
			return "", fmt.Errorf("signed by %s: the subject matches no trusted identity of that issuer", signer)
		}
		if why := diagnose(bun, cert, tr); why != "" {
			return "", fmt.Errorf("signed by %s: %s", signer, why)
		}
		if _, err2 := v.Verify(bun, verify.NewPolicy(verify.WithoutArtifactUnsafe(), opts...)); err2 == nil {
			return "", errors.New(otherArtifact)
		}
		return "", fmt.Errorf("signed by %s: does not verify under the trusted root: %w", signer, err)
	}
	return "keyless:" + sum.Issuer + ":" + sum.SubjectAlternativeName, nil
}

// diagnose says why a keyless bundle the verifier refused fails, for
// the refusal's message: its certificate does not chain to a trusted
// CA, no timestamp is from a trusted timestamp authority, or no trusted
// timestamp falls in the certificate's validity. "" when none of these.
func diagnose(bun *bundle.Bundle, cert *x509.Certificate, tr root.TrustedMaterial) string {
	chains := false
	for _, ca := range tr.FulcioCertificateAuthorities() {
		if _, err := ca.Verify(cert, cert.NotBefore); err == nil {
			chains = true
		}
	}
	if !chains {
		return fmt.Sprintf("certificate (issued by %q) is not from a trusted certificate authority", cert.Issuer.String())
	}
	sc, err := bun.SignatureContent()
	if err != nil {
		return ""
	}
	tss, _ := bun.Timestamps()
	var times []string
	for _, b := range tss {
		for _, tsa := range tr.TimestampingAuthorities() {
			ts, err := tsa.Verify(b, sc.Signature())
			if err != nil {
				continue
			}
			if ts.Time.Before(cert.NotBefore) || ts.Time.After(cert.NotAfter) {
				times = append(times, ts.Time.UTC().Format(time.RFC3339))
				continue
			}
			return ""
		}
	}
	if len(times) == 0 {
		return "no RFC 3161 timestamp from a trusted timestamp authority"
	}
	return fmt.Sprintf("timestamp %s is outside the certificate's validity (%s to %s)", strings.Join(times, ", "),
		cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
}
