package identity

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Revoke erases every copy of the agent's keys in the state dir,
// including those a write cut short by a crash left behind
// (atomicfile's .NAME.tmp-* files, which hold the whole new content):
// a copy of the state dir taken after the revocation holds no key.
func TestRevokeErasesLeftoverKeyFiles(t *testing.T) {
	dir := t.TempDir()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id := Identity{AgentID: "agt_1", InstallID: "ins_1", PrivateKey: key, IMSDKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}
	if err := Save(dir, id); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	// What a crash mid-save leaves, beside each file holding a key.
	leftovers := []string{"." + FileName + ".tmp-123", "." + RotationFileName + ".tmp-456", "." + PendingFileName + ".tmp-789"}
	for _, n := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Revoke(dir, Revocation{At: time.Now(), By: "alice", Reason: "disk stolen"}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// As identity.json holds it (encoding/json: standard base64).
	secret := []byte(base64.StdEncoding.EncodeToString(key))
	for _, e := range entries {
		c, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(c, secret) {
			t.Errorf("%s still holds the agent's key after the revocation", e.Name())
		}
	}
}
