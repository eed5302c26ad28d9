package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// byoc agent publish DIR packs agentd_OS_ARCH and byoc-plugins_OS_ARCH
// into an agent release, signed; a platform missing one of them, or a
// version that is not semantic, pushes nothing.
func TestAgentPublish(t *testing.T) {
	useConfig(t)
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile := filepath.Join(t.TempDir(), "signing.key")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	dist := t.TempDir()
	os.WriteFile(filepath.Join(dist, "agentd_linux_amd64"), []byte("agentd bytes"), 0o755)
	os.WriteFile(filepath.Join(dist, "byoc-plugins_linux_amd64"), []byte("plugins bytes"), 0o755)
	out := filepath.Join(t.TempDir(), "agent")

	r := mustRun(t, "agent", "publish", dist, "--version", "1.5.0", "--to", "oci:"+out, "--signing-key", keyFile, "-o", "json")
	var p struct {
		Reference, Digest string
		SignedBy          string `json:"signed_by"`
		Platforms         []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.SignedBy != agentproto.KeyID(pub) ||
		strings.Join(p.Platforms, ",") != "linux/amd64" || p.Reference != "oci:"+out+"@"+p.Digest {
		t.Fatalf("publish: %v %+v\n%s", err, p, r.stdout)
	}
	ref, err := plugindist.ParseRef(p.Reference)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := ocicopy.Open(t.Context(), ref.Registry, ref.Repository, ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := plugindist.ReadAgent(t.Context(), repo, ref.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := plugindist.Verify(t.Context(), repo, m, []ed25519.PublicKey{pub}); err != nil || id != agentproto.KeyID(pub) {
		t.Fatalf("verify: %s %v", id, err)
	}
	if b, err := plugindist.FetchBinary(t.Context(), repo, m, plugindist.AgentKey("linux/amd64", "byoc-plugins")); err != nil || string(b) != "plugins bytes" {
		t.Fatalf("byoc-plugins: %q %v", b, err)
	}

	if r := byoc(t, "agent", "publish", dist, "--version", "1.5", "--to", "oci:"+filepath.Join(t.TempDir(), "a"), "--signing-key", keyFile); r.code != exitError ||
		!strings.Contains(r.stderr, `version "1.5": want a semantic version`) {
		t.Fatalf("version 1.5: %d %s", r.code, r.stderr)
	}
	os.WriteFile(filepath.Join(dist, "agentd_linux_arm64"), []byte("arm agentd"), 0o755)
	if r := byoc(t, "agent", "publish", dist, "--version", "1.5.0", "--to", "oci:"+filepath.Join(t.TempDir(), "a"), "--signing-key", keyFile); r.code != exitError ||
		!strings.Contains(r.stderr, "the linux/arm64 byoc-plugins binary is missing") {
		t.Fatalf("missing byoc-plugins: %d %s", r.code, r.stderr)
	}
}
