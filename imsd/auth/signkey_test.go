package auth

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Each imsd key rotate keeps the key it replaced in KEYFILE.previous
// (0600), oldest first; imsd loads them back, and refuses a previous key
// its chain does not name (a key imsd never held) or a file others can
// read. A previous key that is the current one (a rotation interrupted
// before it replaced the key file) is skipped.
func TestRotateKeepsThePreviousKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	k0, err := LoadSigningKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := RotateSigningKey(path, now); err != nil {
		t.Fatal(err)
	}
	if _, err := RotateSigningKey(path, now); err != nil {
		t.Fatal(err)
	}
	load := func() ([]PreviousKey, SigningKey, error) {
		t.Helper()
		k, err := LoadSigningKey(path, false)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := LoadKeyChain(path, k)
		if err != nil {
			t.Fatal(err)
		}
		prev, err := LoadPreviousKeys(path, k, chain, now)
		return prev, k, err
	}
	prev, k2, err := load()
	if err != nil || len(prev) != 2 || prev[0].ID != k0.ID || prev[1].ID == k2.ID || prev[1].ID == k0.ID {
		t.Fatalf("previous keys after two rotations: %v, %v", prev, err)
	}
	if fi, err := os.Stat(PreviousFile(path)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v", PreviousFile(path), fi, err)
	}

	// The current key among them: skipped.
	good, _ := os.ReadFile(PreviousFile(path))
	der, _ := x509.MarshalPKCS8PrivateKey(k2.Private)
	withCurrent := append(append([]byte{}, good...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})...)
	if err := os.WriteFile(PreviousFile(path), withCurrent, 0o600); err != nil {
		t.Fatal(err)
	}
	if prev, _, err := load(); err != nil || len(prev) != 2 {
		t.Fatalf("previous keys with the current one among them: %v, %v", prev, err)
	}

	// A key imsd never held: refused, naming the file and the entry.
	stranger, err := LoadSigningKey(filepath.Join(t.TempDir(), "other.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	der, _ = x509.MarshalPKCS8PrivateKey(stranger.Private)
	if err := os.WriteFile(PreviousFile(path), append(append([]byte{}, good...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d: entry 3, key %s, is not a key this signing key's chain", PreviousFile(path), strings.Count(string(good), "\n")+1, stranger.ID)) {
		t.Fatalf("a previous key imsd never held: %v", err)
	}
	// And a rotation stops there, writing nothing.
	before, _ := os.ReadFile(path)
	if _, err := RotateSigningKey(path, now); err == nil {
		t.Fatal("a rotation over a previous-keys file imsd refuses went ahead")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("the refused rotation replaced the key file")
	}

	if err := os.WriteFile(PreviousFile(path), good, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(PreviousFile(path), 0o644)
	if _, _, err := load(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a previous-keys file others can read: %v", err)
	}
}

// rotateAt is RotateSigningKey at now, failing the test on an error.
func rotateAt(t *testing.T, path string, now time.Time) Rotation {
	t.Helper()
	r, err := RotateSigningKey(path, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// loadPreviousAt is LoadPreviousKeys of the key in path at now.
func loadPreviousAt(t *testing.T, path string, now time.Time) ([]PreviousKey, error) {
	t.Helper()
	k, err := LoadSigningKey(path, false)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := LoadKeyChain(path, k)
	if err != nil {
		t.Fatal(err)
	}
	return LoadPreviousKeys(path, k, chain, now)
}

// A previous key is used for PreviousKeyUse after its rotation (a
// bundle's longest validity, 90 days, and 30 to carry its results back:
// the docs say 120 days), then no longer, and the next rotation removes
// it from the file. Before, every previous key was kept and used for
// ever: a leaked old key stayed useful.
func TestPreviousKeysPastTheirUse(t *testing.T) {
	if PreviousKeyUse != 120*24*time.Hour {
		t.Fatalf("PreviousKeyUse is %s; the docs (rotating-keys, offline-bundles) say 120 days", PreviousKeyUse)
	}
	path := filepath.Join(t.TempDir(), "signing.key")
	k0, err := LoadSigningKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(10 * 24 * time.Hour)
	k1 := rotateAt(t, path, t0).Next
	rotateAt(t, path, t1)
	b, _ := os.ReadFile(PreviousFile(path))
	if !strings.Contains(string(b), "Key-Id: "+k0.ID+"\nReplaced-At: 2026-01-01T00:00:00Z\n") {
		t.Fatalf("%s carries no replacement time or key id:\n%s", PreviousFile(path), b)
	}
	for _, c := range []struct {
		at     time.Time
		usable []bool
	}{{t0.Add(PreviousKeyUse - time.Second), []bool{true, true}}, {t0.Add(PreviousKeyUse), []bool{false, true}}, {t1.Add(PreviousKeyUse), []bool{false, false}}} {
		prev, err := loadPreviousAt(t, path, c.at)
		if err != nil || len(prev) != 2 || prev[0].ID != k0.ID || prev[1].ID != k1.ID || !prev[0].ReplacedAt.Equal(t0) || !prev[1].ReplacedAt.Equal(t1) {
			t.Fatalf("previous keys at %s: %+v, %v", c.at, prev, err)
		}
		for i, want := range c.usable {
			if prev[i].UsableAt(c.at) != want {
				t.Fatalf("at %s, previous key %d (replaced %s) usable: %v, want %v", c.at, i+1, prev[i].ReplacedAt, !want, want)
			}
		}
	}
	if until := t0.Add(PreviousKeyUse); !until.Equal(t0.Add(120 * 24 * time.Hour)) {
		t.Fatalf("used until %s", until)
	}

	// A rotation past k0's use removes it, and only it.
	t2 := t0.Add(PreviousKeyUse)
	r := rotateAt(t, path, t2)
	if len(r.Pruned) != 1 || r.Pruned[0].ID != k0.ID || !r.Pruned[0].ReplacedAt.Equal(t0) {
		t.Fatalf("pruned by the rotation at %s: %+v, want %s", t2, r.Pruned, k0.ID)
	}
	prev, err := loadPreviousAt(t, path, t2)
	if err != nil || len(prev) != 2 || prev[0].ID != k1.ID || !prev[0].ReplacedAt.Equal(t1) || prev[1].ID != r.Old.ID || !prev[1].ReplacedAt.Equal(t2) {
		t.Fatalf("previous keys after the pruning rotation: %+v, %v", prev, err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k0.Private)
	if b, _ := os.ReadFile(PreviousFile(path)); strings.Contains(string(b), k0.ID) || strings.Contains(string(b), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})[28:80])) {
		t.Fatalf("%s still holds the pruned key:\n%s", PreviousFile(path), b)
	}
}

// A previous-keys file an older imsd wrote (no Replaced-At) still loads:
// each entry is taken as replaced at the file's modification time (no
// earlier than the rotation that wrote it), is dropped past its use as
// any other, and the next rotation writes that time down.
func TestPreviousKeysOfAnOlderImsd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	k0, err := LoadSigningKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rotateAt(t, path, now)
	// The file as the older imsd wrote it: a bare PEM block.
	der, _ := x509.MarshalPKCS8PrivateKey(k0.Private)
	if err := os.WriteFile(PreviousFile(path), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	mtime := now.Add(-100 * 24 * time.Hour).Truncate(time.Second)
	if err := os.Chtimes(PreviousFile(path), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	prev, err := loadPreviousAt(t, path, now)
	if err != nil || len(prev) != 1 || prev[0].ID != k0.ID || !prev[0].FromModTime || !prev[0].ReplacedAt.Equal(mtime) || !prev[0].UsableAt(now) {
		t.Fatalf("an older imsd's previous key: %+v, %v; want replaced at the file's time %s, usable", prev, err, mtime)
	}
	if prev[0].UsableAt(mtime.Add(PreviousKeyUse)) {
		t.Fatalf("an older imsd's previous key is used past %s", PreviousKeyUse)
	}
	// A rotation writes its time down: a later copy of the file (a new
	// modification time) no longer moves it.
	r := rotateAt(t, path, now)
	if len(r.Pruned) != 0 {
		t.Fatalf("pruned: %+v", r.Pruned)
	}
	os.Chtimes(PreviousFile(path), now, now)
	prev, err = loadPreviousAt(t, path, now)
	if err != nil || len(prev) != 2 || prev[0].ID != k0.ID || prev[0].FromModTime || !prev[0].ReplacedAt.Equal(mtime) {
		t.Fatalf("an older imsd's previous key after a rotation: %+v, %v; want replaced at %s, written down", prev, err, mtime)
	}
	// Past its use, the next rotation removes it.
	if r := rotateAt(t, path, mtime.Add(PreviousKeyUse)); len(r.Pruned) != 1 || r.Pruned[0].ID != k0.ID {
		t.Fatalf("pruned at %s: %+v", mtime.Add(PreviousKeyUse), r.Pruned)
	}
}

// A Replaced-At or Key-Id that is wrong stops imsd and a rotation, naming
// the file, the line and the entry: a date far ahead would keep a key in
// use for as long.
func TestPreviousKeysBadHeaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.key")
	if _, err := LoadSigningKey(path, true); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := rotateAt(t, path, now).Old
	good, _ := os.ReadFile(PreviousFile(path))
	for _, c := range []struct{ name, from, to, want string }{
		{"a Replaced-At not a time", "Replaced-At: ", "Replaced-At: yesterday", `entry 1: Replaced-At "yesterday` + now.UTC().Format(time.RFC3339) + `" is not an RFC 3339 time`},
		{"a Replaced-At ahead", "Replaced-At: " + now.UTC().Format(time.RFC3339), "Replaced-At: " + now.Add(48*time.Hour).UTC().Format(time.RFC3339),
			"entry 1: Replaced-At " + now.Add(48*time.Hour).UTC().Format(time.RFC3339) + " is in the future"},
		{"another key's id", "Key-Id: " + old.ID, "Key-Id: kid_other", "entry 1: Key-Id kid_other, and the key in it is " + old.ID},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := "# kept by imsd key rotate\n" + strings.Replace(string(good), c.from, c.to, 1)
			if err := os.WriteFile(PreviousFile(path), []byte(bad), 0o600); err != nil {
				t.Fatal(err)
			}
			want := PreviousFile(path) + ":2: " + c.want
			if _, err := loadPreviousAt(t, path, now); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("loaded: %v; want %q", err, want)
			}
			before, _ := os.ReadFile(path)
			if _, err := RotateSigningKey(path, now); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("rotated: %v; want %q", err, want)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatal("the refused rotation replaced the key file")
			}
		})
	}
}
