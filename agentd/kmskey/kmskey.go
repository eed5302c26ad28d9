// Package kmskey is the build agent's artifact signing key held in AWS
// KMS (agentd --artifact-signing-key awskms:///KEY): an asymmetric KMS
// key of spec ECC_NIST_EDWARDS25519 whose signatures (ED25519_SHA_512 of
// the RAW message) are standard Ed25519 ones, so they verify under the
// key's public key wherever a file key's do (internal/ocisign,
// internal/attest, cosign verify --key). Key is a crypto.Signer: its
// public key comes from KMS GetPublicKey when the key is opened, and
// every signature from KMS Sign. The URI forms are cosign's:
// awskms:///KEY-ID-OR-ARN-OR-ALIAS, or awskms://ENDPOINT/KEY for a
// KMS reached at https://ENDPOINT (a VPC endpoint, a local fake).
package kmskey

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"

	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// Scheme starts an AWS KMS key's URI.
const Scheme = "awskms://"

// MaxMessage is the longest message KMS signs raw (ED25519_SHA_512 with
// MessageType RAW): 4096 bytes.
const MaxMessage = 4096

// IsURI reports whether s names a KMS key rather than a key file.
func IsURI(s string) bool { return strings.HasPrefix(s, Scheme) }

// ParseURI splits an awskms URI into its endpoint (host[:port], "" for
// the region's own) and key id (a key id, key ARN, alias/NAME or alias
// ARN).
func ParseURI(uri string) (endpoint, keyID string, err error) {
	rest, ok := strings.CutPrefix(uri, Scheme)
	if !ok {
		return "", "", fmt.Errorf("%q is not an AWS KMS key URI (awskms:///KEY or awskms://ENDPOINT/KEY)", uri)
	}
	endpoint, keyID, ok = strings.Cut(rest, "/")
	if !ok || keyID == "" {
		return "", "", fmt.Errorf("%q names no key: want awskms:///KEY-ID-OR-ARN or awskms://ENDPOINT/KEY", uri)
	}
	return endpoint, keyID, nil
}

// Options are how Open reaches KMS.
type Options struct {
	// Credentials sign the calls (required: agentd gives its own, the
	// environment's or the instance profile's).
	Credentials aws.CredentialsProvider
	// Region is KMS's region; "" takes it from the key's ARN, else
	// AWS_REGION, else AWS_DEFAULT_REGION.
	Region string
	// CABundle, when set, is a PEM file of the certificate authorities
	// KMS's TLS certificate is checked against instead of the system's
	// (AWS_CA_BUNDLE, as the AWS SDKs and CLI read it: a TLS-inspecting
	// proxy, a local KMS).
	CABundle string
	// HTTPClient, when set, makes the calls.
	HTTPClient aws.HTTPClient
	// RetryMaxAttempts, when set, bounds the SDK's attempts per call.
	RetryMaxAttempts int
	// Timeout bounds each Sign call (a minute when 0).
	Timeout time.Duration
}

// Key is an open KMS signing key.
type Key struct {
	// URI is the key as configured; ARN is the key's, as KMS named it.
	URI, ARN string
	pub      ed25519.PublicKey
	client   *kms.Client
	timeout  time.Duration
}

// Open reads the public key of the KMS key uri and checks it is an
// Ed25519 signing key; every error names the key.
func Open(ctx context.Context, uri string, o Options) (*Key, error) {
	endpoint, keyID, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	region := o.Region
	if region == "" {
		// arn:PARTITION:kms:REGION:ACCOUNT:key/ID
		if f := strings.Split(keyID, ":"); len(f) >= 6 && f[0] == "arn" {
			region = f[3]
		}
	}
	region = cmp.Or(region, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"))
	if region == "" {
		return nil, fmt.Errorf("AWS KMS key %s: no region: name the key by its ARN or set AWS_REGION", uri)
	}
	if o.Credentials == nil {
		return nil, fmt.Errorf("AWS KMS key %s: no credentials", uri)
	}
	cfg := aws.Config{Region: region, Credentials: aws.NewCredentialsCache(o.Credentials), RetryMaxAttempts: o.RetryMaxAttempts}
	if o.HTTPClient != nil {
		cfg.HTTPClient = o.HTTPClient
	} else if o.CABundle != "" {
		pem, err := os.ReadFile(o.CABundle)
		if err != nil {
			return nil, fmt.Errorf("AWS KMS key %s: AWS_CA_BUNDLE: %w", uri, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("AWS KMS key %s: AWS_CA_BUNDLE %s holds no PEM certificate", uri, o.CABundle)
		}
		cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		})
	}
	client := kms.NewFromConfig(cfg, func(ko *kms.Options) {
		if endpoint != "" {
			ko.BaseEndpoint = aws.String("https://" + endpoint)
		}
	})
	out, err := client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
	if err != nil {
		return nil, fmt.Errorf("AWS KMS key %s: get its public key: %w", uri, apiErr(err))
	}
	if out.KeySpec != types.KeySpecEccNistEdwards25519 {
		return nil, fmt.Errorf("AWS KMS key %s is of key spec %s: artifact signatures are Ed25519, create the key with key spec %s",
			uri, out.KeySpec, types.KeySpecEccNistEdwards25519)
	}
	if out.KeyUsage != types.KeyUsageTypeSignVerify {
		return nil, fmt.Errorf("AWS KMS key %s has key usage %s: a signing key's is %s", uri, out.KeyUsage, types.KeyUsageTypeSignVerify)
	}
	hasAlg := false
	for _, a := range out.SigningAlgorithms {
		hasAlg = hasAlg || a == types.SigningAlgorithmSpecEd25519Sha512
	}
	if !hasAlg {
		return nil, fmt.Errorf("AWS KMS key %s does not sign with %s (it offers %v)", uri, types.SigningAlgorithmSpecEd25519Sha512, out.SigningAlgorithms)
	}
	pk, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("AWS KMS key %s: its public key: %w", uri, err)
	}
	pub, ok := pk.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("AWS KMS key %s: its public key is %T, not Ed25519", uri, pk)
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	return &Key{URI: uri, ARN: cmp.Or(aws.ToString(out.KeyId), keyID), pub: pub, client: client, timeout: timeout}, nil
}

// Public is the key's Ed25519 public key.
func (k *Key) Public() crypto.PublicKey { return k.pub }

// KeyID is agentproto.KeyID of the public key, as signatures name it.
func (k *Key) KeyID() string { return agentproto.KeyID(k.pub) }

// Sign signs msg whole with KMS (ED25519_SHA_512, MessageType RAW): a
// pure Ed25519 signature, so opts must be crypto.Hash(0).
func (k *Key) Sign(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts != nil && opts.HashFunc() != 0 {
		return nil, fmt.Errorf("AWS KMS key %s: signs whole messages (Ed25519), not %v digests", k.URI, opts.HashFunc())
	}
	if len(msg) > MaxMessage {
		return nil, fmt.Errorf("AWS KMS key %s: a message of %d bytes is over KMS's %d-byte limit for signing a raw message", k.URI, len(msg), MaxMessage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	out, err := k.client.Sign(ctx, &kms.SignInput{KeyId: aws.String(k.ARN), Message: msg,
		MessageType: types.MessageTypeRaw, SigningAlgorithm: types.SigningAlgorithmSpecEd25519Sha512})
	if err != nil {
		return nil, fmt.Errorf("AWS KMS key %s: sign: %w", k.URI, apiErr(err))
	}
	return out.Signature, nil
}

// apiErr shortens an SDK error to KMS's code and message when KMS
// answered one (the SDK's own wraps it in operation and request ids).
func apiErr(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("%s: %s", ae.ErrorCode(), ae.ErrorMessage())
	}
	return err
}
