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
	added, err := ExtendKeys(tr, []Endorsement{e2, e1}) // out of order
	if err != nil || len(added) != 2 || !tr[KeyID(pub2)].Equal(pub2) {
		t.Fatalf("two rotations: added %d, %v", len(added), err)
	}
	// An endorsement by a key nobody trusts adds nothing.
	tr = trust()
	if added, err := ExtendKeys(tr, []Endorsement{EndorseKey(evil, evilPub), e2}); err != nil || len(added) != 0 {
		t.Fatalf("untrusted endorsements: added %d, %v", len(added), err)
	}
	// A forged endorsement claiming a trusted signer is an error.
	forged := EndorseKey(evil, evilPub)
	forged.Signer = pub0
	tr = trust()
	if _, err := ExtendKeys(tr, []Endorsement{forged}); err == nil {
		t.Fatal("a forged endorsement by a trusted key was accepted")
	}
	if _, ok := tr[KeyID(evilPub)]; ok {
		t.Fatal("the forged key is trusted")
	}
	// Changing the endorsed key breaks the signature.
	swapped := e1
	swapped.Key = evilPub
	if _, err := ExtendKeys(trust(), []Endorsement{swapped}); err == nil {
		t.Fatal("an endorsement of another key was accepted")
	}
}
