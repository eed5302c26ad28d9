package bundlefile_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

func pack(t *testing.T, key ed25519.PrivateKey) ([]byte, string) {
	t.Helper()
	dir := t.TempDir()
	for p, s := range map[string]string{"jobs.json": "[]\n", "oci/acme/web/blobs/sha256/aa": strings.Repeat("layer", 1000), "oci/acme/web/index.json": "{}"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := bundlefile.Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: "bdl_1", InstallID: "ins_1", Files: files}
	raw, _ := json.Marshal(m)
	pub := key.Public().(ed25519.PublicKey)
	var buf bytes.Buffer
	if err := bundlefile.Write(&buf, dir, raw, bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: agentproto.SignBundleManifest(key, raw)}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), agentproto.KeyID(pub)
}

func verifier(pub ed25519.PublicKey) bundlefile.VerifyFunc {
	return func(raw []byte, _ *bundlefile.Manifest, sig bundlefile.Signature) error {
		return agentproto.VerifyBundleManifest(map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}, sig.KeyID, raw, sig.Signature)
	}
}

func TestRoundTripAndTamper(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	b, _ := pack(t, key)
	dest := filepath.Join(t.TempDir(), "x")
	m, _, err := bundlefile.Read(bytes.NewReader(b), dest, verifier(pub))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 3 {
		t.Fatalf("files %v", m.Files)
	}
	if got, _ := os.ReadFile(filepath.Join(dest, "jobs.json")); string(got) != "[]\n" {
		t.Fatalf("jobs.json %q", got)
	}

	// One byte of a layer changed: refused, naming the file, nothing left.
	bad := bytes.Replace(b, []byte("layerlayer"), []byte("layerLayer"), 1)
	dest2 := filepath.Join(t.TempDir(), "y")
	_, _, err = bundlefile.Read(bytes.NewReader(bad), dest2, verifier(pub))
	var be *bundlefile.Error
	if !errors.As(err, &be) || be.Part != "oci/acme/web/blobs/sha256/aa" || !errors.Is(err, bundlefile.ErrTampered) {
		t.Fatalf("tampered layer: %v", err)
	}
	if _, serr := os.Stat(dest2); !os.IsNotExist(serr) {
		t.Fatalf("dest left behind after a refusal: %v", serr)
	}

	// Signed by another key: refused before any file is written.
	_, other, _ := ed25519.GenerateKey(nil)
	b3, _ := pack(t, other)
	dest3 := filepath.Join(t.TempDir(), "z")
	_, _, err = bundlefile.Read(bytes.NewReader(b3), dest3, verifier(pub))
	if !errors.As(err, &be) || be.Part != bundlefile.SignatureName || !errors.Is(err, agentproto.ErrUnknownKey) {
		t.Fatalf("other key: %v", err)
	}
	if _, serr := os.Stat(dest3); !os.IsNotExist(serr) {
		t.Fatalf("dest written for an unsigned bundle: %v", serr)
	}

	// The manifest edited (the signature no longer matches).
	bad4 := bytes.Replace(b, []byte(`"bdl_1"`), []byte(`"bdl_2"`), 1)
	if _, _, err := bundlefile.Read(bytes.NewReader(bad4), filepath.Join(t.TempDir(), "w"), verifier(pub)); err == nil || !strings.Contains(err.Error(), "does not match the manifest") {
		t.Fatalf("edited manifest: %v", err)
	}
}

// Open unpacks the small files and leaves the streamed one in the tar,
// unread: OpenFile serves it from its range, checked against the signed
// manifest as it is read; a changed byte fails the read at its end,
// naming the file, with the last bytes withheld.
func TestOpenStreams(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	b, _ := pack(t, key)
	const layer = "oci/acme/web/blobs/sha256/aa"
	stream := func(f bundlefile.File) bool { return f.Path == layer }
	open := func(b []byte) (*bundlefile.Bundle, error) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "bundle.tar")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return bundlefile.Open(f, filepath.Join(t.TempDir(), "x"), verifier(pub), stream)
	}
	bdl, err := open(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(bdl.Dir, "jobs.json")); string(got) != "[]\n" {
		t.Fatalf("jobs.json %q", got)
	}
	if _, err := os.Stat(filepath.Join(bdl.Dir, filepath.FromSlash(layer))); !os.IsNotExist(err) {
		t.Fatalf("the streamed file was unpacked: %v", err)
	}
	if !bdl.Streamed(layer) || bdl.Streamed("jobs.json") || bdl.StreamedBytes() != 5000 {
		t.Fatalf("streamed: %v %v %d", bdl.Streamed(layer), bdl.Streamed("jobs.json"), bdl.StreamedBytes())
	}
	rc, err := bdl.OpenFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(rc); err != nil || string(got) != strings.Repeat("layer", 1000) {
		t.Fatalf("streamed content: %v, %d bytes", err, len(got))
	}
	if _, err := bdl.OpenFile("jobs.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenFile of an unpacked file: %v", err)
	}

	// The streamed file tampered with: Open does not read it, so it
	// succeeds; the read fails, naming it, short of its last bytes.
	bad, err := open(bytes.Replace(b, []byte("layerlayer"), []byte("layerLayer"), 1))
	if err != nil {
		t.Fatal(err)
	}
	rc, _ = bad.OpenFile(layer)
	got, err := io.ReadAll(iotest.OneByteReader(rc))
	var be *bundlefile.Error
	if !errors.As(err, &be) || be.Part != layer || !errors.Is(err, bundlefile.ErrTampered) || len(got) >= 5000 {
		t.Fatalf("tampered streamed file: %v after %d bytes", err, len(got))
	}

	// A tar cut short inside the streamed file is refused by Open, though
	// it skips the file's bytes.
	i := bytes.Index(b, []byte("layerlayer"))
	if _, err := open(b[:i+100]); err == nil {
		t.Fatal("a truncated tar opened")
	}
	// An unpacked file tampered with is refused by Open, as by Read.
	if _, err := open(bytes.Replace(b, []byte("[]\n"), []byte("{}\n"), 1)); !errors.As(err, &be) || be.Part != "jobs.json" || !errors.Is(err, bundlefile.ErrTampered) {
		t.Fatalf("tampered unpacked file: %v", err)
	}
}

// WriteFile writes the same tar as Write, with the mode asked for, and
// leaves nothing (neither the file nor its .partial) when a file changed
// since it was scanned.
func TestWriteFileWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := bundlefile.Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindResults, ID: "bdl_1", Files: files})
	sig := bundlefile.Signature{KeyID: "k", Signature: []byte("s")}
	var want bytes.Buffer
	if err := bundlefile.Write(&want, dir, raw, sig); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "results.tar")
	if err := bundlefile.WriteFile(out, 0o600, dir, raw, sig); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("WriteFile wrote %d bytes (%v), Write %d", len(got), err, want.Len())
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}

	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte("{\"changed\":1}"), 0o600); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(t.TempDir(), "results.tar")
	if err := bundlefile.WriteFile(out2, 0o600, dir, raw, sig); err == nil || !strings.Contains(err.Error(), "results.json") {
		t.Fatalf("changed file: %v", err)
	}
	for _, p := range []string{out2, out2 + ".partial"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", p, err)
		}
	}
}
