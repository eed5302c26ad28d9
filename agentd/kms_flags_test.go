package main

import (
	"crypto/ed25519"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/byoc-dev/byoc/agentd/kmskey"
	"github.com/byoc-dev/byoc/agentd/stack/awsfake"
)

// TestArtifactSigningKeyKMS: `agentd --role build --artifact-signing-key
// awskms://ENDPOINT/KEY` opens the key through KMS at start-up, with the
// agent's own credentials (the environment's here) and AWS_CA_BUNDLE;
// an Ed25519 signing key opens, and a key of another spec or usage
// stops the agent (exit 2) before anything started, naming the key.
func TestArtifactSigningKeyKMS(t *testing.T) {
	fake := awsfake.NewKMS(t)
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fake.Server.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", bundle)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDBUILD")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	good := fake.AddKey("ECC_NIST_EDWARDS25519", "SIGN_VERIFY")
	uri := "awskms://" + fake.Endpoint() + "/" + good.ARN
	k, err := openArtifactKey(t.Context(), "build", uri)
	if err != nil {
		t.Fatal(err)
	}
	if kk, ok := k.(*kmskey.Key); !ok || !good.Signer.Public().(ed25519.PublicKey).Equal(kk.Public()) {
		t.Fatalf("opened %T", k)
	}
	if signingKeyFile(uri) != "" || signingKeyFile("signing.key") != "signing.key" {
		t.Fatal("a KMS URI is hidden from plugins as a file")
	}
	for _, c := range []struct{ spec, usage, want string }{
		{"ECC_NIST_P256", "SIGN_VERIFY", "is of key spec ECC_NIST_P256: artifact signatures are Ed25519, create the key with key spec ECC_NIST_EDWARDS25519"},
		{"ECC_NIST_EDWARDS25519", "ENCRYPT_DECRYPT", "has key usage ENCRYPT_DECRYPT: a signing key's is SIGN_VERIFY"},
	} {
		bad := fake.AddKey(c.spec, c.usage)
		uri := "awskms://" + fake.Endpoint() + "/" + bad.ARN
		state := t.TempDir()
		code, stderr := runCapturingStderr(t, []string{"--ims", "http://127.0.0.1:1", "--enroll-token", "enrol", "--state-dir", state,
			"--role", "build", "--artifact-signing-key", uri})
		want := "agentd: --artifact-signing-key: AWS KMS key " + uri + " " + c.want + "\n"
		if code != 2 || stderr != want {
			t.Fatalf("exit %d, stderr %q; want exit 2, %q", code, stderr, want)
		}
		if ents, err := os.ReadDir(state); err != nil || len(ents) > 0 {
			t.Errorf("the state directory holds %v (%v), want nothing", ents, err)
		}
	}
}
