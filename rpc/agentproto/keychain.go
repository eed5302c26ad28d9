package agentproto

import (
	"crypto/ed25519"
	"fmt"
)

// Key rotation. imsd keys rotate makes a new signing key and publishes an
// endorsement of it signed by the key it replaces; imsd sends the whole
// chain of endorsements in every welcome (and at enrolment). An agent
// trusts a new key only through an endorsement by a key it already
// trusts, so whoever does not hold one of imsd's keys cannot add one.
// Rotation is not revocation: the agent keeps trusting the older keys
// (replicas may still sign with one until they restart).

// endorseContext binds an endorsement to its purpose.
const endorseContext = "byoc key endorsement v1\x00"

// Endorsement introduces Key, signed by Signer.
type Endorsement struct {
	Signer    ed25519.PublicKey
	Key       ed25519.PublicKey
	Signature []byte
}

func endorseMessage(next ed25519.PublicKey) []byte {
	return append([]byte(endorseContext), next...)
}

// EndorseKey signs next with prev, the key it replaces.
func EndorseKey(prev ed25519.PrivateKey, next ed25519.PublicKey) Endorsement {
	return Endorsement{Signer: prev.Public().(ed25519.PublicKey), Key: next, Signature: ed25519.Sign(prev, endorseMessage(next))}
}

// Verify reports whether e's signature is its signer's.
func (e Endorsement) Verify() bool {
	return len(e.Signer) == ed25519.PublicKeySize && len(e.Key) == ed25519.PublicKeySize &&
		ed25519.Verify(e.Signer, endorseMessage(e.Key), e.Signature)
}

// ExtendKeys adds to trusted (key id → key) every key of chain endorsed,
// directly or through other endorsements of chain, by a trusted key, and
// returns the keys added. An endorsement by a trusted key whose signature
// does not verify is an error naming it (the chain was tampered with);
// endorsements by keys not trusted are ignored.
// Keys in retired (by id) are never added again.
func ExtendKeys(trusted map[string]ed25519.PublicKey, retired map[string]bool, chain []Endorsement) ([]ed25519.PublicKey, error) {
	var added []ed25519.PublicKey
	for progress := true; progress; {
		progress = false
		for i, e := range chain {
			if len(e.Key) != ed25519.PublicKeySize || len(e.Signer) != ed25519.PublicKeySize {
				return added, fmt.Errorf("key chain[%d]: keys must be %d bytes", i, ed25519.PublicKeySize)
			}
			id := KeyID(e.Key)
			if _, ok := trusted[id]; ok || retired[id] {
				continue
			}
			signer, ok := trusted[KeyID(e.Signer)]
			if !ok || !signer.Equal(e.Signer) {
				continue
			}
			if !e.Verify() {
				return added, fmt.Errorf("key chain[%d]: the endorsement of key %s by trusted key %s does not verify", i, id, KeyID(e.Signer))
			}
			trusted[id] = e.Key
			added = append(added, e.Key)
			progress = true
		}
	}
	return added, nil
}

// Key retirement. imsd key retire signs, with imsd's current key, a
// retirement of each older key; imsd sends them in every challenge. An
// agent applies a retirement signed by a key it trusts (other than the
// retired key itself), stops trusting the retired key for good, and
// ignores any later endorsement of it; it never retires its last key.

// retireContext binds a retirement to its purpose.
const retireContext = "byoc key retirement v1\x00"

// Retirement retires Key, signed by Signer.
type Retirement struct {
	Signer    ed25519.PublicKey
	Key       ed25519.PublicKey
	Signature []byte
}

func retireMessage(old ed25519.PublicKey) []byte {
	return append([]byte(retireContext), old...)
}

// RetireKey signs the retirement of old with signer (a newer key).
func RetireKey(signer ed25519.PrivateKey, old ed25519.PublicKey) Retirement {
	return Retirement{Signer: signer.Public().(ed25519.PublicKey), Key: old, Signature: ed25519.Sign(signer, retireMessage(old))}
}

// Verify reports whether r's signature is its signer's, and its signer is
// not the key it retires.
func (r Retirement) Verify() bool {
	return len(r.Signer) == ed25519.PublicKeySize && len(r.Key) == ed25519.PublicKeySize && !r.Signer.Equal(r.Key) &&
		ed25519.Verify(r.Signer, retireMessage(r.Key), r.Signature)
}

// RetireKeys removes from trusted every key a retirement of rs retires,
// when that retirement is signed by another trusted key, and adds its id
// to retired; it returns the keys removed. A retirement by a trusted key
// that does not verify is an error naming it; one that would leave no
// trusted key is skipped.
func RetireKeys(trusted map[string]ed25519.PublicKey, retired map[string]bool, rs []Retirement) ([]ed25519.PublicKey, error) {
	var removed []ed25519.PublicKey
	for i, r := range rs {
		if len(r.Key) != ed25519.PublicKeySize || len(r.Signer) != ed25519.PublicKeySize {
			return removed, fmt.Errorf("retired key[%d]: keys must be %d bytes", i, ed25519.PublicKeySize)
		}
		id := KeyID(r.Key)
		k, ok := trusted[id]
		if !ok || !k.Equal(r.Key) {
			continue
		}
		signer, ok := trusted[KeyID(r.Signer)]
		if !ok || !signer.Equal(r.Signer) || signer.Equal(r.Key) {
			continue
		}
		if !r.Verify() {
			return removed, fmt.Errorf("retired key[%d]: the retirement of key %s by trusted key %s does not verify", i, id, KeyID(r.Signer))
		}
		if len(trusted) < 2 {
			continue
		}
		delete(trusted, id)
		retired[id] = true
		removed = append(removed, r.Key)
	}
	return removed, nil
}
