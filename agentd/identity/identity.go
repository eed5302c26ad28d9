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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
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
	// PreviousKeyIDs are the ids (agentproto.KeyID) of the agent's own
	// keys replaced by rotations, oldest first; KeyCreatedAt is when the
	// current key was made by a rotation (zero: at enrolment) and
	// KeyRotatedAt when the rotation completed.
	PreviousKeyIDs []string  `json:"previous_key_ids,omitempty"`
	KeyCreatedAt   time.Time `json:"key_created_at,omitzero"`
	KeyRotatedAt   time.Time `json:"key_rotated_at,omitzero"`
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
	if r, err := Revoked(dir); err != nil {
		return Identity{}, err
	} else if r != nil {
		return Identity{}, RevokedError(dir, r)
	}
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

// Rotation of the agent's own key (agentd identity rotate). The customer's
// command writes the next key, endorsed by the current one, to
// RotationFileName; the agent sends the endorsement to imsd in its next
// hello (through the channel its current key authenticates) and, once
// imsd's welcome says it recorded the next key, re-signs the customer's
// control files with it and saves identity.json with it (package
// permissions, CommitRotation), then removes RotationFileName. Until
// then both keys check the control files, so a crash at any step leaves an
// agent that starts with either key and every control file verifying; a
// rotation, once started, only goes forward.

// RotationFileName holds the next key while a rotation is under way.
const RotationFileName = "identity-next.json"

// Rotation is a rotation under way.
type Rotation struct {
	PrivateKey ed25519.PrivateKey `json:"private_key"`
	// Endorsement is the current key's signature of the next, Proof the
	// next key's (agentproto.AgentKeyRotation).
	Endorsement []byte    `json:"endorsement"`
	Proof       []byte    `json:"proof"`
	StartedAt   time.Time `json:"started_at"`
	StartedBy   string    `json:"started_by,omitempty"`
}

// Public is the next key's public half.
func (r Rotation) Public() ed25519.PublicKey { return r.PrivateKey.Public().(ed25519.PublicKey) }

// Statement is the rotation as imsd checks it, from the agent id's key.
func (r Rotation) Statement(id Identity) agentproto.AgentKeyRotation {
	return agentproto.AgentKeyRotation{AgentID: id.AgentID, Current: id.PrivateKey.Public().(ed25519.PublicKey), Next: r.Public(),
		Endorsement: r.Endorsement, Proof: r.Proof}
}

// ErrRotationPending refuses a second rotation while one is under way.
var ErrRotationPending = errors.New("a rotation of the agent's key is under way already")

// BeginRotation makes the next key of the agent enrolled in dir, endorsed
// by its current key, and writes it to RotationFileName (0600,
// atomically). It refuses while a rotation is under way.
func BeginRotation(dir string, now time.Time, by string) (Rotation, error) {
	id, err := Load(dir)
	if err != nil && !errors.Is(err, ErrNoIMSDKey) {
		return Rotation{}, err
	}
	if r, err := PendingRotation(dir, id); err != nil {
		return Rotation{}, err
	} else if r != nil {
		return *r, fmt.Errorf("%w (next key %s, started %s): the agent completes it at its next connection to imsd",
			ErrRotationPending, agentproto.KeyID(r.Public()), r.StartedAt.Format(time.RFC3339))
	}
	next, err := NewKey()
	if err != nil {
		return Rotation{}, err
	}
	st := agentproto.RotateAgentKey(id.AgentID, id.PrivateKey, next)
	r := Rotation{PrivateKey: next, Endorsement: st.Endorsement, Proof: st.Proof, StartedAt: now.UTC().Truncate(time.Second), StartedBy: by}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return Rotation{}, err
	}
	if err := atomicfile.Write(filepath.Join(dir, RotationFileName), append(b, '\n'), 0o600); err != nil {
		return Rotation{}, err
	}
	return r, nil
}

// PendingRotation returns the rotation under way for the agent id of dir,
// or nil when there is none, or when its key is id's already (it was
// committed; DropRotation removes the file). A file that is not endorsed
// by id's key is an error naming it: the agent does not use it.
func PendingRotation(dir string, id Identity) (*Rotation, error) {
	path := filepath.Join(dir, RotationFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Rotation
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.PrivateKey) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%s: private_key missing or malformed", path)
	}
	if r.PrivateKey.Equal(id.PrivateKey) {
		return nil, nil
	}
	if !r.Statement(id).Verify() {
		return nil, fmt.Errorf("%s: the next key is not endorsed by this agent's key %s (not written by agentd identity rotate on this agent): the agent ignores it; remove it",
			path, agentproto.KeyID(id.PrivateKey.Public().(ed25519.PublicKey)))
	}
	return &r, nil
}

// DropRotation removes RotationFileName once identity.json holds its key.
func DropRotation(dir string) error {
	err := os.Remove(filepath.Join(dir, RotationFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Rotated is id with r's key as its key: what identity.json holds after
// the rotation.
func (id Identity) Rotated(r Rotation, now time.Time) Identity {
	out := id
	out.PreviousKeyIDs = append(slices.Clone(id.PreviousKeyIDs), agentproto.KeyID(id.PrivateKey.Public().(ed25519.PublicKey)))
	out.PrivateKey = r.PrivateKey
	out.KeyCreatedAt = r.StartedAt
	out.KeyRotatedAt = now.UTC().Truncate(time.Second)
	return out
}

// KeyIDOf is the id (agentproto.KeyID) of k's public key.
func KeyIDOf(k ed25519.PrivateKey) string { return agentproto.KeyID(k.Public().(ed25519.PublicKey)) }

// Revocation by the customer (agentd identity revoke): the customer ends
// the vendor's access through this agent for good. RevokedFileName
// records it; the agent's key is then erased from identity.json (and the
// next key of a rotation under way, and a pre-enrolment key, removed), so
// nothing on this machine can speak for the agent again. A running agent
// stops within a second; no agent starts on this state dir again: the way
// back is a new agent, enrolled with a new enrolment token, in a new
// state dir.

// RevokedFileName records the customer's revocation in the state dir.
const RevokedFileName = "revoked.json"

// Revocation is the customer's revocation of their agent.
type Revocation struct {
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	// IMSDTold says whether imsd acknowledged it (the vendor then sees
	// the agent as revoked, not offline).
	IMSDTold bool `json:"imsd_told"`
	// Call is, while imsd has not acknowledged it, the revocation call
	// signed with the agent's key before the key was erased, for
	// agentd identity revoke to send again: it can only revoke this
	// agent, so it is no secret.
	Call *RevokeCall `json:"imsd_call,omitempty"`
}

// RevokeCall is a signed RevokeSelf call: its time and signature (its
// agent, by and reason are the identity's and the revocation's).
type RevokeCall struct {
	Time      time.Time `json:"time"`
	Signature []byte    `json:"signature"`
}

// MarkIMSDTold records in dir that imsd acknowledged the revocation, and
// drops the signed call kept for it.
func MarkIMSDTold(dir string) error {
	r, err := Revoked(dir)
	if err != nil || r == nil {
		return err
	}
	r.IMSDTold, r.Call = true, nil
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, RevokedFileName), append(b, '\n'), 0o600)
}

// LoadErased reads the identity of a revoked agent, whose key is erased:
// its id, install and imsd's URL.
func LoadErased(dir string) (Identity, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, fmt.Errorf("%s: %w", filepath.Join(dir, FileName), err)
	}
	return id, nil
}

// ErrRevoked is returned by Load for an agent its customer revoked.
var ErrRevoked = errors.New("revoked by the customer")

// Revoked returns the customer's revocation of the agent of dir, nil for
// none.
func Revoked(dir string) (*Revocation, error) {
	path := filepath.Join(dir, RevokedFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Revocation
	if err := json.Unmarshal(b, &r); err != nil {
		// Unreadable, it still says revoked: never read as "not revoked".
		return &Revocation{Reason: fmt.Sprintf("(%s unreadable: %v)", path, err)}, nil
	}
	return &r, nil
}

// Revoke records r in dir (0600, atomically) and erases every private key
// of the agent in dir. It is final.
func Revoke(dir string, r Revocation) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, RevokedFileName), append(b, '\n'), 0o600); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, FileName))
	if err == nil {
		var id Identity
		if json.Unmarshal(raw, &id) == nil {
			id.PrivateKey = nil
			if err := Save(dir, id); err != nil {
				return fmt.Errorf("erase the agent's key: %w", err)
			}
		}
	}
	for _, f := range []string{RotationFileName, PendingFileName} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("erase %s: %w", f, err)
		}
	}
	// A write of any of them cut short by a crash left its whole new
	// content, key and all, in atomicfile's temporary file.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		for _, f := range []string{FileName, RotationFileName, PendingFileName} {
			if strings.HasPrefix(e.Name(), "."+f+".tmp-") {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("erase %s: %w", e.Name(), err)
				}
			}
		}
	}
	return nil
}

// RevokedError says who revoked the agent of dir, when and why.
func RevokedError(dir string, r *Revocation) error {
	return fmt.Errorf("%w (%s at %s, %q; see %s): this agent never connects again; to give the vendor access again, enrol a new agent with a new enrolment token in a new state dir",
		ErrRevoked, r.By, r.At.UTC().Format(time.RFC3339), r.Reason, filepath.Join(dir, RevokedFileName))
}

// KeyFiles are the files of the state directory that hold a private key
// of the agent.
var KeyFiles = []string{FileName, RotationFileName, PendingFileName}

// ReadableKeyFiles says which of dir's key files (KeyFiles) users other
// than the agent's own may read, each as "NAME (mode 0644: readable by
// every user)" or "… by its group …": the key in such a file lets
// whoever reads it act as the agent.
func ReadableKeyFiles(dir string) []string {
	var out []string
	for _, name := range KeyFiles {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		switch m := fi.Mode().Perm(); {
		case m&0o004 != 0:
			out = append(out, fmt.Sprintf("%s (mode %04o: readable by every user of this machine)", name, m))
		case m&0o040 != 0:
			out = append(out, fmt.Sprintf("%s (mode %04o: readable by its group, gid %d)", name, m, gidOf(fi)))
		}
	}
	return out
}

// gidOf is the group that owns the file fi describes, or -1.
func gidOf(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Gid)
	}
	return -1
}
