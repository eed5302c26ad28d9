package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// byoc plugin publish DIR packs one binary per byoc-plugin-NAME_OS_ARCH
// file with the describe output of this machine's, into an OCI layout,
// signed with the key given; what disagrees with --name or --version, or
// a key that is not Ed25519 PKCS#8, pushes nothing.
func TestPluginPublish(t *testing.T) {
	useConfig(t)
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile := filepath.Join(t.TempDir(), "signing.key")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	dist := t.TempDir()
	here := "byoc-plugin-kv_" + runtime.GOOS + "_" + runtime.GOARCH
	script := "#!/bin/sh\necho '{\"type\": \"kv\", \"version\": \"1.2.0\", \"protocol\": \"1.3\"}'\n"
	os.WriteFile(filepath.Join(dist, here), []byte(script), 0o755)
	os.WriteFile(filepath.Join(dist, "byoc-plugin-kv_plan9_386"), []byte("other bytes"), 0o755)
	out := filepath.Join(t.TempDir(), "kv")

	r := mustRun(t, "plugin", "publish", dist, "--name", "kv", "--version", "1.2.0", "--to", "oci:"+out, "--signing-key", keyFile, "-o", "json")
	var p struct {
		Reference, Digest string
		SignedBy          string `json:"signed_by"`
		Platforms         []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.SignedBy != agentproto.KeyID(pub) ||
		strings.Join(p.Platforms, ",") != runtime.GOOS+"/"+runtime.GOARCH+",plan9/386" || p.Reference != "oci:"+out+"@"+p.Digest {
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
	m, err := plugindist.Read(t.Context(), repo, ref.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := plugindist.Verify(t.Context(), repo, m, []ed25519.PublicKey{pub}); err != nil || id != agentproto.KeyID(pub) {
		t.Fatalf("verify: %s %v", id, err)
	}
	if bin, err := plugindist.FetchBinary(t.Context(), repo, m, "plan9/386"); err != nil || string(bin) != "other bytes" {
		t.Fatalf("plan9 binary: %q %v", bin, err)
	}
	if d, err := repo.Resolve(t.Context(), "1.2.0"); err != nil || d.Digest != ref.Digest {
		t.Fatalf("tag 1.2.0: %v %v", d.Digest, err)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--name", "kw", "--version", "1.2.0"}, exitError, `the binary describes type "kv", not "kw" (--name)`},
		{[]string{"--name", "kv", "--version", "1.3.0"}, exitError, `the binary describes version "1.2.0", not "1.3.0" (--version)`},
		{[]string{"--name", "kv"}, exitUsage, "--name, --version, --to and --signing-key are required"},
	} {
		fresh := filepath.Join(t.TempDir(), "kv")
		args := append([]string{"plugin", "publish", filepath.Join(dist, here), "--to", "oci:" + fresh, "--signing-key", keyFile}, tc.args...)
		if r := byoc(t, args...); r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Errorf("%q: something was pushed: %v", tc.args, err)
		}
	}
	os.WriteFile(keyFile, []byte("not a key"), 0o600)
	if r := byoc(t, "plugin", "publish", dist, "--name", "kv", "--version", "1.2.0", "--to", "oci:"+out, "--signing-key", keyFile); r.code != exitError || !strings.Contains(r.stderr, "no PEM block") {
		t.Errorf("a bad key: exit %d %q", r.code, r.stderr)
	}
	// register reads the describe output from the release (then needs
	// imsd, which this test has not: the error is the connection's).
	if r := byoc(t, "plugin", "register", "oci:"+out+":1.2.0"); r.code == 0 || !strings.Contains(r.stderr, "names a tag only") {
		t.Errorf("register by tag: exit %d %q", r.code, r.stderr)
	}
}
