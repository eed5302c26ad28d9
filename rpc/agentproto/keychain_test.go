package agentproto

import (
	"crypto/ed25519"
	"testing"
)

// A rotated key is trusted only through an endorsement by a trusted key,
// through any number of rotations, in any order of the chain.
func TestExtendKeys(t *testing.T) {
	pub0, k0, _ := ed25519.GenerateKey(nil)
	pub1, k1, _ := ed25519.GenerateKey(nil)
	pub2, _, _ := ed25519.GenerateKey(nil)
	evilPub, evil, _ := ed25519.GenerateKey(nil)
	e1 := EndorseKey(k0, pub1)
	e2 := EndorseKey(k1, pub2)
	trust := func() map[string]ed25519.PublicKey { return map[string]ed25519.PublicKey{KeyID(pub0): pub0} }

	tr := trust()
	added, err := ExtendKeys(tr, nil, []Endorsement{e2, e1}) // out of order
	if err != nil || len(added) != 2 || !tr[KeyID(pub2)].Equal(pub2) {
		t.Fatalf("two rotations: added %d, %v", len(added), err)
	}
	// An endorsement by a key nobody trusts adds nothing.
	tr = trust()
	if added, err := ExtendKeys(tr, nil, []Endorsement{EndorseKey(evil, evilPub), e2}); err != nil || len(added) != 0 {
		t.Fatalf("untrusted endorsements: added %d, %v", len(added), err)
	}
	// A forged endorsement claiming a trusted signer is an error.
	forged := EndorseKey(evil, evilPub)
	forged.Signer = pub0
	tr = trust()
	if _, err := ExtendKeys(tr, nil, []Endorsement{forged}); err == nil {
		t.Fatal("a forged endorsement by a trusted key was accepted")
	}
	if _, ok := tr[KeyID(evilPub)]; ok {
		t.Fatal("the forged key is trusted")
	}
	// Changing the endorsed key breaks the signature.
	swapped := e1
	swapped.Key = evilPub
	if _, err := ExtendKeys(trust(), nil, []Endorsement{swapped}); err == nil {
		t.Fatal("an endorsement of another key was accepted")
	}
}

// A retired key leaves the trusted set only through a retirement signed
// by another trusted key, is never endorsed back in, and the last trusted
// key is never retired.
func TestRetireKeys(t *testing.T) {
	pub0, k0, _ := ed25519.GenerateKey(nil)
	pub1, k1, _ := ed25519.GenerateKey(nil)
	evilPub, evil, _ := ed25519.GenerateKey(nil)
	tr := map[string]ed25519.PublicKey{KeyID(pub0): pub0, KeyID(pub1): pub1}
	retired := map[string]bool{}

	// Signed by the retired key itself, or by a key not trusted: ignored.
	self := RetireKey(k0, pub0)
	if removed, err := RetireKeys(tr, retired, []Retirement{self, RetireKey(evil, pub0)}); err != nil || len(removed) != 0 || len(tr) != 2 {
		t.Fatalf("self-signed or untrusted: removed %d, %v", len(removed), err)
	}
	// Forged in a trusted key's name: an error, nothing removed.
	forged := RetireKey(evil, pub0)
	forged.Signer = pub1
	if _, err := RetireKeys(tr, retired, []Retirement{forged}); err == nil || len(tr) != 2 {
		t.Fatalf("forged: %v, %d trusted", err, len(tr))
	}
	removed, err := RetireKeys(tr, retired, []Retirement{RetireKey(k1, pub0)})
	if err != nil || len(removed) != 1 || len(tr) != 1 || !retired[KeyID(pub0)] {
		t.Fatalf("retired by the new key: removed %d, %v, trusted %d", len(removed), err, len(tr))
	}
	// The old endorsement chain does not bring it back.
	if added, err := ExtendKeys(tr, retired, []Endorsement{EndorseKey(k0, pub1), EndorseKey(k1, pub0)}); err != nil || len(added) != 0 {
		t.Fatalf("re-endorsed: added %d, %v", len(added), err)
	}
	// The last key stays.
	_ = evilPub
	if removed, _ := RetireKeys(tr, retired, []Retirement{RetireKey(k1, pub1)}); len(removed) != 0 || len(tr) != 1 {
		t.Fatalf("the last key was retired")
	}
}
