package kmskey

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"net"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
)

var creds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "AKIDBUILD", SecretAccessKey: "secret", Source: "test"}, nil
})

// TestOpenRefuses: Open, through the real KMS client and awsfake.KMS,
// refuses a key that cannot make byoc's Ed25519 signatures, each error
// naming the key and why: a P-256 key, an encryption key, an unknown
// key, an unreachable KMS, a URI naming no key, no region.
func TestOpenRefuses(t *testing.T) {
	fake := awsfake.NewKMS(t)
	opts := Options{Credentials: creds, HTTPClient: fake.Server.Client(), RetryMaxAttempts: 1}
	p256 := fake.AddKey("ECC_NIST_P256", "SIGN_VERIFY")
	enc := fake.AddKey("ECC_NIST_EDWARDS25519", "ENCRYPT_DECRYPT")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	at := func(endpoint, key string) string { return "awskms://" + endpoint + "/" + key }
	for _, c := range []struct {
		name, uri string
		want      []string
	}{
		{"P-256 key", at(fake.Endpoint(), p256.ARN), []string{"AWS KMS key " + at(fake.Endpoint(), p256.ARN) + " is of key spec ECC_NIST_P256", "ECC_NIST_EDWARDS25519"}},
		{"encryption key", at(fake.Endpoint(), enc.ARN), []string{"AWS KMS key " + at(fake.Endpoint(), enc.ARN) + " has key usage ENCRYPT_DECRYPT", "SIGN_VERIFY"}},
		{"unknown key", at(fake.Endpoint(), "arn:aws:kms:eu-west-1:111122223333:key/nope"),
			[]string{"AWS KMS key " + at(fake.Endpoint(), "arn:aws:kms:eu-west-1:111122223333:key/nope") + ": get its public key: NotFoundException"}},
		{"unreachable", at(closed, p256.ARN), []string{"AWS KMS key " + at(closed, p256.ARN) + ": get its public key:", "connection refused"}},
		{"no key", "awskms:///", []string{`"awskms:///" names no key`}},
		{"no region", "awskms:///alias/build", []string{"AWS KMS key awskms:///alias/build: no region"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("AWS_REGION", "")
			t.Setenv("AWS_DEFAULT_REGION", "")
			k, err := Open(t.Context(), c.uri, opts)
			if err == nil {
				t.Fatalf("opened %s", k.ARN)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	for _, c := range fake.Calls() {
		if c.Action == "Sign" {
			t.Fatalf("a refused key was asked to sign: %+v", c)
		}
	}
}

// TestKeySigns: an opened key's signatures are Ed25519 ones under its
// public key; a digest signature (crypto.SHA256) and a message over
// KMS's 4096-byte raw limit are refused before KMS is asked, naming the
// key.
func TestKeySigns(t *testing.T) {
	fake := awsfake.NewKMS(t)
	fk := fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY")
	uri := "awskms://" + fake.Endpoint() + "/" + fk.ARN
	k, err := Open(t.Context(), uri, Options{Credentials: creds, HTTPClient: fake.Server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	var _ crypto.Signer = k
	msg := []byte(strings.Repeat("m", MaxMessage))
	sig, err := k.Sign(nil, msg, crypto.Hash(0))
	if err != nil || !ed25519.Verify(k.Public().(ed25519.PublicKey), msg, sig) {
		t.Fatalf("sign: %v", err)
	}
	calls := len(fake.Calls())
	if _, err := k.Sign(nil, append(msg, 'x'), crypto.Hash(0)); err == nil || !strings.Contains(err.Error(), "AWS KMS key "+uri+": a message of 4097 bytes is over KMS's 4096-byte limit") {
		t.Fatalf("a 4097-byte message: %v", err)
	}
	if _, err := k.Sign(nil, msg[:32], crypto.SHA256); err == nil || !strings.Contains(err.Error(), "AWS KMS key "+uri+": signs whole messages") {
		t.Fatalf("a digest: %v", err)
	}
	if n := len(fake.Calls()); n != calls {
		t.Fatalf("%d calls reached KMS", n-calls)
	}
}
