package bundlefile_test

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/bundlefile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// entry is one tar entry after the manifest and its signature.
type entry struct {
	h    tar.Header
	body string
}

// craft writes a tar whose manifest, signed by key, lists files, and
// whose entries after the signature are entries: what anyone carrying
// (or making) a bundle may put in it.
func craft(t *testing.T, key ed25519.PrivateKey, files []bundlefile.File, entries []entry) []byte {
	t.Helper()
	raw, _ := json.Marshal(bundlefile.Manifest{Format: bundlefile.Format, Kind: bundlefile.KindBundle, ID: "bdl_1", InstallID: "ins_1", Files: files})
	pub := key.Public().(ed25519.PublicKey)
	sig, _ := json.Marshal(bundlefile.Signature{KeyID: agentproto.KeyID(pub), Signature: agentproto.SignBundleManifest(key, raw)})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range append([]entry{
		{tar.Header{Typeflag: tar.TypeReg, Name: bundlefile.ManifestName, Size: int64(len(raw)), Mode: 0o644}, string(raw)},
		{tar.Header{Typeflag: tar.TypeReg, Name: bundlefile.SignatureName, Size: int64(len(sig)), Mode: 0o644}, string(sig)},
	}, entries...) {
		if err := tw.WriteHeader(&e.h); err != nil {
			t.Fatal(err)
		}
		if e.h.Size > int64(len(e.body)) {
			// A header claiming more than follows: the tar ends here.
			tw.Flush()
			return buf.Bytes()
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func listed(path, body string) bundlefile.File {
	sum := sha256.Sum256([]byte(body))
	return bundlefile.File{Path: path, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
}

func reg(name, body string) entry {
	return entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(body)), Mode: 0o644}, body}
}

// Every tar entry an attacker controls is checked against the signed
// manifest before anything of it lands outside the new directory: links,
// devices, directories, names that climb out, duplicates, sizes the
// manifest does not give (a huge one is refused from its header, before
// its bytes are read), and a manifest (signed by a key trusted, so made
// by the vendor's side) listing a path that climbs out or one that is
// both a file and a directory. Each refusal names the entry and removes
// the directory; nothing is written beside it.
func TestReadRefusesCraftedEntries(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	const jobs = "[]\n"
	one := []bundlefile.File{listed("jobs.json", jobs)}
	for _, c := range []struct {
		name    string
		files   []bundlefile.File
		entries []entry
		part    string
		want    string
	}{
		{"a symlink in a listed file's place", one, []entry{{tar.Header{Typeflag: tar.TypeSymlink, Name: "jobs.json", Linkname: "/etc/passwd"}, ""}}, "jobs.json", "not a regular file"},
		{"a hard link in a listed file's place", one, []entry{{tar.Header{Typeflag: tar.TypeLink, Name: "jobs.json", Linkname: "../../etc/passwd"}, ""}}, "jobs.json", "not a regular file"},
		{"a device in a listed file's place", one, []entry{{tar.Header{Typeflag: tar.TypeChar, Name: "jobs.json", Devmajor: 1, Devminor: 3}, ""}}, "jobs.json", "not a regular file"},
		{"a directory entry", one, []entry{{tar.Header{Typeflag: tar.TypeDir, Name: "oci/", Mode: 0o755}, ""}, reg("jobs.json", jobs)}, "oci/", "not listed in the manifest"},
		{"a name that climbs out", one, []entry{reg("../escape", "x"), reg("jobs.json", jobs)}, "../escape", "not listed in the manifest"},
		{"an absolute name", one, []entry{reg("/tmp/escape", "x"), reg("jobs.json", jobs)}, "/tmp/escape", "not listed in the manifest"},
		{"a listed file twice", one, []entry{reg("jobs.json", jobs), reg("jobs.json", jobs)}, "jobs.json", "found twice"},
		{"a size the manifest does not give", one, []entry{reg("jobs.json", jobs+"more")}, "jobs.json", "7 bytes where the manifest says 3"},
		{"an absurd size, truncated", one, []entry{{tar.Header{Typeflag: tar.TypeReg, Name: "jobs.json", Size: 1 << 40, Mode: 0o644}, ""}}, "jobs.json", "1099511627776 bytes where the manifest says 3"},
		{"a listed file missing", append(one, listed("oci/x", "x")), []entry{reg("jobs.json", jobs)}, "oci/x", "missing from the file"},
		{"a signed path that climbs out", []bundlefile.File{listed("a/../../escape", "x")}, []entry{reg("a/../../escape", "x")}, bundlefile.ManifestName, "not a clean relative path"},
		{"a signed absolute path", []bundlefile.File{listed("/tmp/escape", "x")}, []entry{reg("/tmp/escape", "x")}, bundlefile.ManifestName, "not a clean relative path"},
		{"a signed path that is a file and a directory", []bundlefile.File{listed("a", "x"), listed("a/b", "y")}, []entry{reg("a", "x"), reg("a/b", "y")}, "a/b", "not a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := craft(t, key, c.files, c.entries)
			parent := t.TempDir()
			dest := filepath.Join(parent, "x")
			_, _, err := bundlefile.Read(bytes.NewReader(b), dest, verifier(pub))
			var be *bundlefile.Error
			if !errors.As(err, &be) || be.Part != c.part || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error of %s containing %q", err, c.part, c.want)
			}
			if ents, _ := os.ReadDir(parent); len(ents) > 0 {
				t.Fatalf("left %v beside the refused file", ents)
			}
		})
	}
}
