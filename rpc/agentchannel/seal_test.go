package agentchannel

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
)

// A sealed file opens only with the reader's key and under its info; a
// changed byte, another key or another info each refuse it, and the
// plaintext appears nowhere in the sealed bytes.
func TestSealOpen(t *testing.T) {
	_, agent, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	secret := []byte(`[{"config":{"env":{"TOKEN":"tok-planted-7c1e9a0b"}}}]`)
	info := []byte("byoc bundle jobs v1\x00ins_1\x00agt_1")
	sealed, err := SealTo(agent.Public().(ed25519.PublicKey), info, secret)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("tok-planted")) {
		t.Fatal("the sealed bytes carry the plaintext")
	}
	got, err := OpenWith(agent, info, sealed)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if _, err := OpenWith(other, info, sealed); !errors.Is(err, ErrSealed) {
		t.Errorf("another key opened it: %v", err)
	}
	if _, err := OpenWith(agent, []byte("byoc bundle jobs v1\x00ins_2\x00agt_1"), sealed); !errors.Is(err, ErrSealed) {
		t.Errorf("another info opened it: %v", err)
	}
	changed := bytes.Clone(sealed)
	changed[len(changed)-1] ^= 1
	if _, err := OpenWith(agent, info, changed); !errors.Is(err, ErrSealed) {
		t.Errorf("a changed file opened: %v", err)
	}
	if _, err := OpenWith(agent, info, sealed[:10]); err == nil {
		t.Error("a cut file opened")
	}
}
