package auth

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if _, _, err := RotateSigningKey(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RotateSigningKey(path); err != nil {
		t.Fatal(err)
	}
	load := func() ([]SigningKey, SigningKey, error) {
		t.Helper()
		k, err := LoadSigningKey(path, false)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := LoadKeyChain(path, k)
		if err != nil {
			t.Fatal(err)
		}
		prev, err := LoadPreviousKeys(path, k, chain)
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
	if _, _, err := load(); err == nil || !strings.Contains(err.Error(), PreviousFile(path)+": entry 3, key "+stranger.ID+", is not a key this signing key's chain") {
		t.Fatalf("a previous key imsd never held: %v", err)
	}
	// And a rotation stops there, writing nothing.
	before, _ := os.ReadFile(path)
	if _, _, err := RotateSigningKey(path); err == nil {
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
