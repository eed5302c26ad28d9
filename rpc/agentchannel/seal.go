package agentchannel

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hpke"
	"errors"
	"fmt"
)

// Sealed files: what travels through hands that must not read it (an
// offline bundle's jobs, carried by the vendor's operator to the
// customer; its results' copy of them, carried back) is sealed to the
// one key that may: HPKE (RFC 9180) base mode, DHKEM(X25519,
// HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, to the X25519 form of
// the reader's Ed25519 key pinned at enrolment (the channel's keys).
// info binds the file to what it is for (its kind, install and agent):
// a sealed file opened under another info fails, so one cannot be
// passed off as another.

// maxSealed bounds what Open reads.
const maxSealed = 64 << 20

func suite() (hpke.KDF, hpke.AEAD) { return hpke.HKDFSHA256(), hpke.ChaCha20Poly1305() }

// SealTo seals plaintext so that only the holder of the Ed25519 private
// key of pub can open it, under info.
func SealTo(pub ed25519.PublicKey, info, plaintext []byte) ([]byte, error) {
	x, err := X25519Public(pub)
	if err != nil {
		return nil, err
	}
	epk, err := ecdh.X25519().NewPublicKey(x)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	pk, err := hpke.NewDHKEMPublicKey(epk)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	kdf, aead := suite()
	return hpke.Seal(pk, kdf, aead, info, plaintext)
}

// ErrSealed is returned by OpenWith for a sealed file that does not open
// with this key under this info: sealed to another key, for something
// else, or changed.
var ErrSealed = errors.New("sealed to another key, for something else, or changed")

// OpenWith opens what SealTo sealed to key's public key under info.
func OpenWith(key ed25519.PrivateKey, info, sealed []byte) ([]byte, error) {
	if len(sealed) > maxSealed {
		return nil, fmt.Errorf("open: %d bytes, more than %d", len(sealed), maxSealed)
	}
	dh, err := x25519Key(key)
	if err != nil {
		return nil, err
	}
	esk, err := ecdh.X25519().NewPrivateKey(dh.Private)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	sk, err := hpke.NewDHKEMPrivateKey(esk)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	kdf, aead := suite()
	b, err := hpke.Open(sk, kdf, aead, info, sealed)
	if err != nil {
		return nil, ErrSealed
	}
	return b, nil
}
