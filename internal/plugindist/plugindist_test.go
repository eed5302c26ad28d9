package plugindist_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"oras.land/oras-go/v2"

	"github.com/byoc-dev/byoc/internal/ocicopy"
	"github.com/byoc-dev/byoc/internal/plugindist"
)

func layout(t *testing.T) *ocicopy.Repo {
	t.Helper()
	r, err := ocicopy.Open(t.Context(), ocicopy.Registry{LayoutRoot: t.TempDir()}, "plugins/kv", ocicopy.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var describe = []byte(`{"type": "kv", "version": "1.0.0", "protocol": "1.3"}`)

func release() plugindist.Release {
	return plugindist.Release{Type: "kv", Version: "1.0.0", Describe: describe,
		Binaries: map[string][]byte{"linux/amd64": []byte("amd64 bytes"), "linux/arm64": []byte("arm64 bytes")}}
}

// The same release gives the same digest in any repository; what Read
// returns is what was pushed; a signature verifies with its key only.
func TestPushReadVerify(t *testing.T) {
	ctx := t.Context()
	a, b := layout(t), layout(t)
	da, err := plugindist.Push(ctx, a, "1.0.0", release())
	if err != nil {
		t.Fatal(err)
	}
	db, err := plugindist.Push(ctx, b, "", release())
	if err != nil || db.Digest != da.Digest {
		t.Fatalf("digests %s and %s (%v): want the same", da.Digest, db.Digest, err)
	}
	m, err := plugindist.Read(ctx, a, da.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != "kv" || m.Version != "1.0.0" || string(m.Describe) != string(describe) || strings.Join(m.Platforms(), ",") != "linux/amd64,linux/arm64" {
		t.Fatalf("read: %+v", m)
	}
	if bin, err := plugindist.FetchBinary(ctx, a, m, "linux/arm64"); err != nil || string(bin) != "arm64 bytes" {
		t.Fatalf("arm64 binary: %q %v", bin, err)
	}
	if _, err := plugindist.FetchBinary(ctx, a, m, "darwin/arm64"); err == nil || !strings.Contains(err.Error(), "has no binary for darwin/arm64; it has: linux/amd64, linux/arm64") {
		t.Fatalf("missing platform: %v", err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := plugindist.Verify(ctx, a, m, []ed25519.PublicKey{pub}); err == nil || !strings.Contains(err.Error(), "it has no signature") {
		t.Fatalf("unsigned: %v", err)
	}
	if _, err := plugindist.Sign(ctx, a, m.Descriptor, "kv", "1.0.0", key); err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.Verify(ctx, a, m, []ed25519.PublicKey{other, pub}); err != nil {
		t.Fatalf("signed: %v", err)
	}
	if _, err := plugindist.Verify(ctx, a, m, []ed25519.PublicKey{other}); err == nil || !strings.Contains(err.Error(), "(not trusted)") {
		t.Fatalf("another key: %v", err)
	}
}

// What is not a plugin release, or does not agree with itself, is
// refused before anything is pushed or read further.
func TestRefusals(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		edit func(*plugindist.Release)
		want string
	}{
		{"other type", func(r *plugindist.Release) { r.Type = "kw" }, `the binary describes type "kv", not "kw" (--name)`},
		{"other version", func(r *plugindist.Release) { r.Version = "2" }, `the binary describes version "1.0.0", not "2" (--version)`},
		{"bad platform", func(r *plugindist.Release) { r.Binaries["amd64"] = []byte("x") }, `platform "amd64": want OS/ARCH`},
		{"no binaries", func(r *plugindist.Release) { r.Binaries = nil }, "no binaries"},
		{"not describe output", func(r *plugindist.Release) { r.Describe = []byte("usage: ...") }, "describe output is not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := release()
			tc.edit(&r)
			if _, err := plugindist.Push(ctx, layout(t), "", r); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	// Another artifact is no plugin release.
	r := layout(t)
	md, err := oras.PackManifest(ctx, r, oras.PackManifestVersion1_1, "application/vnd.example.thing", oras.PackManifestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugindist.Read(ctx, r, md.Digest); err == nil || !strings.Contains(err.Error(), "is not a plugin release (artifact type \"application/vnd.example.thing\"") {
		t.Fatalf("a module: %v", err)
	}
	for s, want := range map[string]string{
		"oci://127.0.0.1:5000/plugins/kv:1.0.0":       "names a tag only",
		"ftp://x/y@sha256:" + strings.Repeat("a", 64): `scheme "ftp"`,
	} {
		if _, err := plugindist.ParseRef(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRef(%q) = %v, want %q", s, err, want)
		}
	}
	if ref, err := plugindist.ParseRef("oci://127.0.0.1:5000/plugins/kv@sha256:" + strings.Repeat("a", 64)); err != nil || !ref.Registry.PlainHTTP || ref.Repository != "plugins/kv" {
		t.Errorf("ParseRef of a loopback registry: %+v %v", ref, err)
	}
}
