package agentproto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Signed jobs. imsd signs every assignment it hands out with its Ed25519
// key; the agent refuses to ack (and so to run) one whose signature does
// not verify under the key it learnt at enrolment. What is signed is
// JobClaims.Message: a fixed context string, then each claim in a fixed
// order, strings as a 4-byte big-endian length and their bytes, integers
// as 8 bytes big-endian (two's complement), the config digest as its 32
// bytes. The format is simple enough to check in a few lines of any
// language (docs/design/signed-jobs.md).
//
// v2 adds the agent's id after the install's: an assignment is signed
// for one agent, so a copy handed to another agent of the same install
// (by anyone on the path) does not verify there. Its per-agent replay
// record could not catch that copy: it has never seen it.

// jobContext binds a job signature to its purpose and version, so that no
// other signature of the key (a future message kind) can pass for it.
const jobContext = "byoc job signature v2\x00"

// KeyIDLen is the length of a key id in hex digits (128 bits).
const KeyIDLen = 32

// KeyID is a public key's fingerprint: the first 16 bytes of the SHA-256
// of its 32 raw bytes, in lowercase hex. It names imsd's signing key in
// each signature and in enrolment tokens (TOKEN.KEYID).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:KeyIDLen/2])
}

// JobClaims is what imsd signs for one assignment.
type JobClaims struct {
	// KeyID names the key that signs (KeyID of its public key).
	KeyID     string
	InstallID string
	// AgentID is the agent the assignment is for: the verifier puts its
	// own id here, never one the assignment carries.
	AgentID      string
	JobID        string
	Attempt      int64
	FencingToken int64
	// Mode is the permission mode the job needs, as the assignment names
	// it ("" from an imsd before modes, which the agent reads as
	// maintenance).
	Mode string
	// Component is the install component the job is for (it picks the
	// component's state directory on the agent); "" for none.
	Component     string
	ComponentType string
	Operation     string
	// TimeoutSeconds is the job's time limit as the assignment carries it.
	TimeoutSeconds int64
	// ConfigDigest is ConfigDigest of the job's config.
	ConfigDigest [32]byte
	// Expires is when the signature stops being valid; it is signed in
	// Unix milliseconds.
	Expires time.Time
	// ApprovedPlanDigest is, for the apply of a plan an operator
	// approved, that plan's digest (PlanDigest): the agent applies only
	// if a fresh plan has the same. It is signed after Expires, and only
	// when set, so every other job's message is unchanged.
	ApprovedPlanDigest string
	// Grant is the registry grant the assignment carries (nil: none). It
	// is signed after everything else, behind its own context string, so
	// a job without one signs the same bytes as before grants existed,
	// and no approved plan digest (a length-prefixed string) reads as a
	// grant or the other way round.
	Grant *GrantClaims
	// WindowBound marks a job of a release, which the agent refuses
	// outside the customer's maintenance window. It is signed last, and
	// only when set (behind its own context string), so every other job
	// signs the same bytes as before; a copy with the flag stripped does
	// not verify.
	WindowBound bool
}

// windowContext marks a window-bound job's message.
const windowContext = "\x00window bound"

// GrantClaims is a registry grant as a job signature covers it.
type GrantClaims struct {
	ID, Secret, Registry, Service string
	Scopes                        []string
	// Expires is signed in Unix milliseconds.
	Expires time.Time
}

// grantContext separates the grant's claims from the job's.
const grantContext = "\x00registry grant"

// Message is the byte string the signature covers.
func (c *JobClaims) Message() []byte {
	b := make([]byte, 0, 256)
	b = append(b, jobContext...)
	for _, s := range []string{c.KeyID, c.InstallID, c.AgentID, c.JobID} {
		b = appendString(b, s)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(c.Attempt))
	b = binary.BigEndian.AppendUint64(b, uint64(c.FencingToken))
	for _, s := range []string{c.Mode, c.Component, c.ComponentType, c.Operation} {
		b = appendString(b, s)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(c.TimeoutSeconds))
	b = append(b, c.ConfigDigest[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Expires.UnixMilli()))
	if c.ApprovedPlanDigest != "" {
		b = appendString(b, c.ApprovedPlanDigest)
	}
	if g := c.Grant; g != nil {
		b = append(b, grantContext...)
		for _, s := range []string{g.ID, g.Secret, g.Registry, g.Service} {
			b = appendString(b, s)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(g.Scopes)))
		for _, s := range g.Scopes {
			b = appendString(b, s)
		}
		b = binary.BigEndian.AppendUint64(b, uint64(g.Expires.UnixMilli()))
	}
	if c.WindowBound {
		b = append(b, windowContext...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// SignJob signs c with imsd's key.
func SignJob(key ed25519.PrivateKey, c *JobClaims) []byte {
	return ed25519.Sign(key, c.Message())
}

// Reasons VerifyJob refuses a job. Each refusal wraps one of them.
var (
	ErrUnsigned     = errors.New("the assignment is not signed")
	ErrUnknownKey   = errors.New("signed by an unknown key")
	ErrBadSignature = errors.New("the signature does not match the assignment (tampered with, or not signed by imsd)")
	ErrExpired      = errors.New("the signature has expired")
)

// VerifyJob checks sig, made by the key c.KeyID names, over c: keys maps
// the key ids the verifier trusts to their public keys. It refuses an
// expired signature (now after c.Expires); the caller checks that
// c.InstallID is its own, sets c.AgentID to its own id (so an assignment
// signed for another agent fails here as a bad signature) and checks that
// the job was not run before.
func VerifyJob(keys map[string]ed25519.PublicKey, c *JobClaims, sig []byte, now time.Time) error {
	if len(sig) == 0 {
		return ErrUnsigned
	}
	pub, ok := keys[c.KeyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w %q", ErrUnknownKey, c.KeyID)
	}
	if !ed25519.Verify(pub, c.Message(), sig) {
		return ErrBadSignature
	}
	if now.UnixMilli() > c.Expires.UnixMilli() {
		return fmt.Errorf("%w: it expired at %s and this machine's clock says %s (if the clocks disagree, fix them)",
			ErrExpired, c.Expires.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ConfigDigest is the SHA-256 of a job config's canonical encoding, the
// config as the agent sees it (the JSON object imsd stores, decoded with
// numbers as float64; the agent's Struct.AsMap gives the same values). A
// Struct's protobuf encoding is not canonical (map order), so the digest
// is over this encoding, which both sides compute from the values alone:
//
//	null    'n'
//	false   'f'          true 't'
//	number  'd' + 8 bytes: the IEEE 754 binary64 bits, big-endian
//	string  's' + 4-byte big-endian length + UTF-8 bytes
//	list    'l' + 4-byte big-endian count + each item
//	object  'o' + 4-byte big-endian count + for each key in byte order:
//	        4-byte length + key bytes, then the value
//
// A nil map is the empty object. Any other Go type is an error, and so is
// a config past the limits CheckConfig enforces (MaxConfigDepth and the
// rest), with the same *ConfigError.
func ConfigDigest(cfg map[string]any) ([32]byte, error) {
	w := configWalker{encode: true}
	if cfg == nil {
		cfg = map[string]any{}
	}
	if err := w.walk(cfg, 0); err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(w.b), nil
}
