// Package identity keeps an agent's identity in its state directory: the
// Ed25519 key pair the agent made itself, the agent id imsd gave it at
// enrolment, the install it is bound to, and imsd's job signing key as
// checked at enrolment against the enrolment token's fingerprint. The
// private key never leaves the state directory.
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/byoc-dev/byoc/internal/atomicfile"
)

// FileName is the identity file inside the state directory.
const FileName = "identity.json"

// Identity is an enrolled agent's identity.
type Identity struct {
	AgentID    string             `json:"agent_id"`
	InstallID  string             `json:"install_id"`
	IMSURL     string             `json:"ims_url"`
	PrivateKey ed25519.PrivateKey `json:"private_key"`
	// IMSDKeys are the public keys whose job signatures the agent
	// accepts: imsd's signing key learnt at enrolment.
	IMSDKeys []ed25519.PublicKey `json:"imsd_keys"`
	// RetiredIMSDKeys are the ids of imsd's keys retired after a rotation
	// (imsd key retire): never trusted again, whatever endorses them.
	RetiredIMSDKeys []string `json:"retired_imsd_keys,omitempty"`
}

// ErrNoIMSDKey is returned by Load for an identity that holds no imsd
// signing key: one enrolled before imsd signed jobs.
var ErrNoIMSDKey = errors.New("holds no imsd signing key (enrolled before imsd signed jobs)")

// ErrNotEnrolled is returned by Load when the state directory holds no identity.
var ErrNotEnrolled = errors.New("not enrolled")

// NewKey makes a fresh key pair.
func NewKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	return priv, err
}

// Load reads the identity from dir.
func Load(dir string) (Identity, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return Identity{}, ErrNotEnrolled
	}
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, fmt.Errorf("%s: %w", filepath.Join(dir, FileName), err)
	}
	if id.AgentID == "" || len(id.PrivateKey) != ed25519.PrivateKeySize {
		return Identity{}, fmt.Errorf("%s: agent_id or private_key missing or malformed", filepath.Join(dir, FileName))
	}
	for i, k := range id.IMSDKeys {
		if len(k) != ed25519.PublicKeySize {
			return Identity{}, fmt.Errorf("%s: imsd_keys[%d]: want %d bytes, got %d", filepath.Join(dir, FileName), i, ed25519.PublicKeySize, len(k))
		}
	}
	if len(id.IMSDKeys) == 0 {
		return id, fmt.Errorf("%s %w", filepath.Join(dir, FileName), ErrNoIMSDKey)
	}
	return id, nil
}

// Save writes the identity to dir atomically, readable by the owner only.
func Save(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, FileName), b, 0o600)
}

// PendingFileName holds the key pair made before enrolment, when the
// customer set their controls (agentd permissions) before the agent first
// enrolled: the agent enrols with that key, so the control files it signed
// stay valid, and removes the file once identity.json holds the key.
const PendingFileName = "enrolment-key.json"

type pending struct {
	PrivateKey ed25519.PrivateKey `json:"private_key"`
}

// PendingKey returns the key made before enrolment, or nil when there is
// none.
func PendingKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, PendingFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p pending
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(p.PrivateKey) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%s: private_key malformed", path)
	}
	return p.PrivateKey, nil
}

// EnrolmentKey returns the key to enrol with: the one made before
// enrolment if there is one, else a fresh one.
func EnrolmentKey(dir string) (ed25519.PrivateKey, error) {
	k, err := PendingKey(dir)
	if err != nil || k != nil {
		return k, err
	}
	return NewKey()
}

// DropPending removes the pre-enrolment key once the identity holds it.
func DropPending(dir string) error {
	err := os.Remove(filepath.Join(dir, PendingFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// SigningKey returns the identity whose key signs and checks the
// customer's control files in dir: the enrolled identity, or before
// enrolment one holding only the pending key (AgentID empty), made and
// saved (0600) now when create is set and there is none yet. With
// create unset and no key at all, it returns ErrNotEnrolled.
func SigningKey(dir string, create bool) (Identity, error) {
	id, err := Load(dir)
	if err == nil || errors.Is(err, ErrNoIMSDKey) {
		return id, nil
	}
	if !errors.Is(err, ErrNotEnrolled) {
		return Identity{}, err
	}
	k, err := PendingKey(dir)
	if err != nil {
		return Identity{}, err
	}
	if k == nil {
		if !create {
			return Identity{}, ErrNotEnrolled
		}
		if k, err = NewKey(); err != nil {
			return Identity{}, err
		}
		b, err := json.MarshalIndent(pending{PrivateKey: k}, "", "  ")
		if err != nil {
			return Identity{}, err
		}
		if err := atomicfile.Write(filepath.Join(dir, PendingFileName), b, 0o600); err != nil {
			return Identity{}, err
		}
	}
	return Identity{PrivateKey: k}, nil
}
