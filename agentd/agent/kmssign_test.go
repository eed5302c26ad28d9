package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/opencontainers/go-digest"

	"github.com/byoc-dev/byoc/agentd/kmskey"
	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
	"github.com/byoc-dev/byoc/internal/attest"
	"github.com/byoc-dev/byoc/internal/ocicopy/ocitest"
	"github.com/byoc-dev/byoc/internal/ocisign"
	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// staticCreds are the build agent's AWS credentials in tests.
var staticCreds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "AKIDBUILD", SecretAccessKey: "secret", Source: "test"}, nil
})

// TestSupplyChainSignsWithKMS: a build agent whose ArtifactKey is an AWS
// KMS key (agentd/kmskey, through the real aws-sdk-go-v2 kms client and
// awsfake.KMS) signs what it builds and attests it; the signature and
// the provenance verify under the KMS key's public key with the
// verifiers install agents use (ocisign.VerifyTrusted, attest.Find), and
// every Sign call KMS received named the key's ARN, ED25519_SHA_512 and
// MessageType RAW. A Sign call KMS refuses mid-build fails the build
// naming the key and KMS's error.
func TestSupplyChainSignsWithKMS(t *testing.T) {
	reg, env, repo := vendorRegistry(t)
	ctx := t.Context()
	fake := awsfake.NewKMS(t)
	fk := fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY")
	uri := "awskms://" + fake.Endpoint() + "/" + fk.ID
	key, err := kmskey.Open(ctx, uri, kmskey.Options{Credentials: staticCreds, Region: "eu-west-1", HTTPClient: fake.Server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	pub := fk.Signer.Public().(ed25519.PublicKey)
	if !pub.Equal(key.Public()) || key.ARN != fk.ARN {
		t.Fatalf("opened key %s with another public key", key.ARN)
	}

	d, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 1, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	r := &PluginRunner{InstallRegistry: "http://" + reg.Host, ArtifactKey: key}
	var logs []string
	log := func(_ int32, s string) { logs = append(logs, s) }
	build := func(dg digest.Digest) (map[string]string, error) {
		out := map[string]string{"repository": "acme/web", "digest": dg.String(), "source": "src/web:1", "source_digest": digest.FromString("src").String()}
		err := r.signBuild(ctx, Job{ID: "job-1", Attempt: 1, ComponentType: BuildType, Operation: sdk.OpApply, registryEnv: env,
			Config: map[string]any{"kind": "sync", "source": "src/web:1", "repository": "acme/web"}}, out, time.Now(), log)
		return out, err
	}
	out, err := build(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if out["signed_by"] != agentproto.KeyID(pub) || out["attestations"] != attest.SLSAProvenanceV1 {
		t.Fatalf("outputs %v", out)
	}
	signer, err := ocisign.VerifyTrusted(ctx, repo, d, ocisign.ArtifactType, "", "acme/web@"+d.Digest.String(), []ed25519.PublicKey{pub}, nil)
	if err != nil || signer != agentproto.KeyID(pub) {
		t.Fatalf("verify the KMS signature: %q %v", signer, err)
	}
	found, err := attest.Find(ctx, repo, d, []ed25519.PublicKey{pub})
	if err != nil || len(found.Verified) != 1 || len(found.Rejected) != 0 || found.Verified[0].KeyID != agentproto.KeyID(pub) {
		t.Fatalf("find the KMS-signed provenance: %+v %v", found, err)
	}
	// Another key does not verify them.
	other, _, _ := ed25519.GenerateKey(nil)
	if _, err := ocisign.VerifyTrusted(ctx, repo, d, ocisign.ArtifactType, "", "x", []ed25519.PublicKey{other}, nil); err == nil {
		t.Fatal("the KMS signature verified under another key")
	}

	// What KMS was asked: GetPublicKey of the key as configured, then
	// three signatures (the OCI signature, cosign's .sig payload, the
	// provenance's DSSE envelope), each of the ARN, raw, Ed25519.
	var signs int
	for _, c := range fake.Calls() {
		var in struct{ KeyId, MessageType, SigningAlgorithm string }
		if err := json.Unmarshal([]byte(c.Params.Get("body")), &in); err != nil {
			t.Fatal(err)
		}
		if c.AccessKeyID != "AKIDBUILD" || c.Status != 200 {
			t.Fatalf("call %+v", c)
		}
		switch c.Action {
		case "GetPublicKey":
			if in.KeyId != fk.ID {
				t.Fatalf("GetPublicKey of %q, want %q", in.KeyId, fk.ID)
			}
		case "Sign":
			signs++
			if in.KeyId != fk.ARN || in.MessageType != "RAW" || in.SigningAlgorithm != "ED25519_SHA_512" {
				t.Fatalf("Sign %+v", in)
			}
		default:
			t.Fatalf("unexpected call %s", c.Action)
		}
	}
	if signs != 3 {
		t.Fatalf("%d Sign calls, want 3", signs)
	}

	// KMS refuses a signature mid-build (the key disabled since the
	// agent started): the build fails naming the key and KMS's error.
	fake.FailSign(fk, "DisabledException", fk.ARN+" is disabled.")
	d2, err := ocitest.Image(ctx, repo, ocitest.ImageSpec{Seed: 2, Layers: []int64{64}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = build(d2.Digest)
	if err == nil {
		t.Fatal("a build whose signature KMS refused succeeded")
	}
	for _, w := range []string{"sign the build acme/web@" + d2.Digest.String(), "AWS KMS key " + uri, "DisabledException", "is disabled"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if refs, err := repo.Referrers(ctx, d2, 10); err != nil || len(refs) != 0 {
		t.Fatalf("the refused build left referrers %v (%v)", refs, err)
	}
}
