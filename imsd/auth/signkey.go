package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/internal/atomicfile"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// SigningKey is imsd's Ed25519 job signing key: every assignment imsd
// hands out is signed with it, and agents learn its public key at
// enrolment (the enrolment token carries its id, EnrollToken).
type SigningKey struct {
	Private ed25519.PrivateKey
	Public  ed25519.PublicKey
	// ID is the public key's fingerprint (agentproto.KeyID).
	ID string
}

// NewSigningKey wraps a private key.
func NewSigningKey(priv ed25519.PrivateKey) SigningKey {
	pub := priv.Public().(ed25519.PublicKey)
	return SigningKey{Private: priv, Public: pub, ID: agentproto.KeyID(pub)}
}

// Sign fills in c's key id and signs it.
func (k SigningKey) Sign(c *agentproto.JobClaims) []byte {
	c.KeyID = k.ID
	return agentproto.SignJob(k.Private, c)
}

// SignBatch fills in each claims' key id and signs them all with one
// batch signature (agentproto.SignJobBatch), returning each one's proof.
func (k SigningKey) SignBatch(cs []*agentproto.JobClaims) ([]byte, []agentproto.JobBatchProof, error) {
	for _, c := range cs {
		c.KeyID = k.ID
	}
	return agentproto.SignJobBatch(k.Private, cs)
}

// LoadSigningKey reads a signing key file: a PKCS#8 "PRIVATE KEY" PEM
// block holding an Ed25519 key (what `openssl genpkey -algorithm
// ed25519` writes). With create set, a missing file is created with a
// new key (0600, written atomically). Errors name the file.
func LoadSigningKey(path string, create bool) (SigningKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return SigningKey{}, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return SigningKey{}, err
		}
		if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return SigningKey{}, fmt.Errorf("write signing key %s: %w", path, err)
		}
		return NewSigningKey(priv), nil
	}
	if err != nil {
		return SigningKey{}, fmt.Errorf("read signing key: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return SigningKey{}, fmt.Errorf("signing key %s: mode %o lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return SigningKey{}, fmt.Errorf("signing key %s: want a PEM \"PRIVATE KEY\" block (PKCS#8 Ed25519)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return SigningKey{}, fmt.Errorf("signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return SigningKey{}, fmt.Errorf("signing key %s: a %T, want an Ed25519 key", path, k)
	}
	return NewSigningKey(priv), nil
}

// NewEnrollToken returns a new enrolment token bound to the signing key
// keyID, SECRET.KEYID, and the hash imsd stores (of SECRET only, so the
// token stays single-use whatever key id a caller appends). The agent
// checks the public key imsd sends at enrolment against KEYID.
func NewEnrollToken(keyID string) (token, hash string) {
	secret := NewSecret(EnrollTokenPrefix)
	return secret + "." + keyID, Hash(secret)
}

// EnrollTokenHash is the stored hash of an enrolment token presented by
// an agent: of its secret part, before the first '.'.
func EnrollTokenHash(token string) string {
	secret, _, _ := strings.Cut(token, ".")
	return Hash(secret)
}

// ChainFile is the file beside a signing key that holds its key chain.
func ChainFile(keyFile string) string { return keyFile + ".chain" }

type chainEntry struct {
	Signer    []byte `json:"signer"`
	Key       []byte `json:"key"`
	Signature []byte `json:"signature"`
}

// LoadKeyChain reads the endorsements of keyFile's rotations (none if
// the key was never rotated) and checks that they lead to key: a replica
// given a rotated key without its chain, or the reverse, would sign jobs
// no agent accepts.
func LoadKeyChain(keyFile string, key SigningKey) ([]agentproto.Endorsement, error) {
	path := ChainFile(keyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read key chain: %w", err)
	}
	var entries []chainEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("key chain %s: %w", path, err)
	}
	chain := make([]agentproto.Endorsement, len(entries))
	for i, e := range entries {
		chain[i] = agentproto.Endorsement{Signer: e.Signer, Key: e.Key, Signature: e.Signature}
		if !chain[i].Verify() {
			return nil, fmt.Errorf("key chain %s: entry %d does not verify", path, i)
		}
	}
	if len(chain) > 0 && !chain[len(chain)-1].Key.Equal(key.Public) {
		return nil, fmt.Errorf("key chain %s ends with key %s, but the signing key is %s: give every replica the key file and its chain together",
			path, agentproto.KeyID(chain[len(chain)-1].Key), key.ID)
	}
	return chain, nil
}

// Rotation is what RotateSigningKey did.
type Rotation struct {
	// Old is the key replaced (now the last entry of PreviousFile), Next
	// the key that replaced it.
	Old, Next SigningKey
	// Pruned are the previous keys the rotation dropped from
	// PreviousFile: replaced longer than PreviousKeyUse ago.
	Pruned []PreviousKey
}

// RotateSigningKey replaces the key in keyFile with a new one and appends
// its endorsement by the old key to the chain file, and the old key
// itself, replaced at now, to the previous-keys file (PreviousFile),
// both written first: a crash in between leaves the old key, an
// endorsement nobody uses and a previous key that is the current one
// (LoadPreviousKeys skips it). The previous-keys file is rewritten
// without the keys replaced longer than PreviousKeyUse before now, and
// with every key's replacement time (an entry of an older imsd has none:
// it is written with the one it was taken to have, the file's
// modification time). A running imsd keeps signing with the key it
// loaded until it restarts.
func RotateSigningKey(keyFile string, now time.Time) (Rotation, error) {
	var r Rotation
	old, err := LoadSigningKey(keyFile, false)
	if err != nil {
		return r, err
	}
	r.Old = old
	chain, err := LoadKeyChain(keyFile, old)
	if err != nil {
		return r, err
	}
	// Read before anything is written: a previous-keys file imsd would
	// refuse stops the rotation here.
	prevKeys, err := LoadPreviousKeys(keyFile, old, chain, now)
	if err != nil {
		return r, err
	}
	var prev []byte
	for _, k := range prevKeys {
		if !k.UsableAt(now) {
			r.Pruned = append(r.Pruned, k)
			continue
		}
		b, err := k.encode()
		if err != nil {
			return r, err
		}
		prev = append(prev, b...)
	}
	b, err := PreviousKey{SigningKey: old, ReplacedAt: now}.encode()
	if err != nil {
		return r, err
	}
	prev = append(prev, b...)
	if err := atomicfile.Write(PreviousFile(keyFile), prev, 0o600); err != nil {
		return r, fmt.Errorf("write previous keys: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return r, err
	}
	next := NewSigningKey(priv)
	chain = append(chain, agentproto.EndorseKey(old.Private, next.Public))
	entries := make([]chainEntry, len(chain))
	for i, e := range chain {
		entries[i] = chainEntry{Signer: e.Signer, Key: e.Key, Signature: e.Signature}
	}
	b, err = json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return r, err
	}
	if err := atomicfile.Write(ChainFile(keyFile), append(b, '\n'), 0o600); err != nil {
		return r, fmt.Errorf("write key chain: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return r, err
	}
	if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return r, fmt.Errorf("write signing key %s: %w", keyFile, err)
	}
	r.Next = next
	return r, nil
}

// PreviousFile is the file beside a signing key that holds the keys it
// replaced (RotateSigningKey), oldest first: PEM "PRIVATE KEY" blocks,
// each with a Replaced-At header (RFC 3339: when the rotation replaced
// it) and a Key-Id header (informational, checked). imsd opens and
// checks with them the results of offline bundles made before a
// rotation (their jobs come back sealed to the key that signed them),
// for PreviousKeyUse after each was replaced; it signs nothing with them.
func PreviousFile(keyFile string) string { return keyFile + ".previous" }

// PreviousKeyMargin is how long, past the expiry of the last job a
// previous key can have signed, imsd still opens results with it: the
// time to carry a results file back from the customer.
const PreviousKeyMargin = 30 * 24 * time.Hour

// PreviousKeyUse is how long after its rotation imsd uses a previous
// key. Every bundle job a key signed was signed before the rotation (an
// imsd whose key file was rotated under it makes no more bundles:
// operatorapi CreateBundle), and valid for at most
// agentproto.MaxBundleValidity; the agent runs no expired job, so no
// result of one can be made later than that. A key older than this is
// needed by nothing and only a risk if it leaked: imsd stops using it
// and the next rotation removes it from PreviousFile.
const PreviousKeyUse = agentproto.MaxBundleValidity + PreviousKeyMargin

// PreviousKey is a key a rotation replaced, and when.
type PreviousKey struct {
	SigningKey
	// ReplacedAt is when the rotation replaced it (its Replaced-At
	// header; FromModTime: the file's modification time, for an entry
	// an older imsd wrote without one, which is no earlier than the
	// rotation that wrote it).
	ReplacedAt  time.Time
	FromModTime bool
	// Entry is its place in PreviousFile (1: the oldest) and Line the
	// line its PEM block starts on.
	Entry, Line int
}

// UsableUntil is when imsd stops opening results with k.
func (k PreviousKey) UsableUntil() time.Time { return k.ReplacedAt.Add(PreviousKeyUse) }

// UsableAt reports whether imsd opens results with k at now.
func (k PreviousKey) UsableAt(now time.Time) bool { return now.Before(k.UsableUntil()) }

// encode is k's PEM block in PreviousFile.
func (k PreviousKey) encode() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der, Headers: map[string]string{
		replacedAtHeader: k.ReplacedAt.UTC().Format(time.RFC3339), keyIDHeader: k.ID}}), nil
}

// The headers of a PreviousFile entry.
const (
	replacedAtHeader = "Replaced-At"
	keyIDHeader      = "Key-Id"
)

// maxClockSkew is how far in the future a Replaced-At may be (the
// rotation ran on another machine whose clock is ahead) before
// LoadPreviousKeys takes it for a mistake: a date far ahead would keep
// the key in use for as long.
const maxClockSkew = 24 * time.Hour

// LoadPreviousKeys reads the previous keys beside keyFile (none if there
// is no such file), used or not at now: the caller drops the ones not
// UsableAt now. Each must be a key imsd held: one that endorsed its
// successor in chain (LoadKeyChain's). An entry that is key itself (a
// rotation interrupted before it replaced the key file) is skipped. An
// entry with no Replaced-At (written by an imsd older than it) is taken
// as replaced at the file's modification time. Errors name the file, the
// line and the entry.
func LoadPreviousKeys(keyFile string, key SigningKey, chain []agentproto.Endorsement, now time.Time) ([]PreviousKey, error) {
	path := PreviousFile(keyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read previous keys: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read previous keys: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("previous keys %s: mode %o lets others read them; chmod 600 it", path, fi.Mode().Perm())
	}
	var out []PreviousKey
	rest := b
	for i := 1; ; i++ {
		line := 1 + bytes.Count(b[:len(b)-len(rest)], []byte("\n"))
		if j := bytes.Index(rest, []byte("-----BEGIN")); j >= 0 {
			line += bytes.Count(rest[:j], []byte("\n"))
		}
		at := fmt.Sprintf("previous keys %s:%d: entry %d", path, line, i)
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, fmt.Errorf("%s: not a PEM block", at)
			}
			return out, nil
		}
		if blk.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("%s: a %q block, want \"PRIVATE KEY\" (PKCS#8 Ed25519)", at, blk.Type)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%s: a %T, want an Ed25519 key", at, k)
		}
		pk := PreviousKey{SigningKey: NewSigningKey(priv), Entry: i, Line: line}
		if id, ok := blk.Headers[keyIDHeader]; ok && id != pk.ID {
			return nil, fmt.Errorf("%s: %s %s, and the key in it is %s", at, keyIDHeader, id, pk.ID)
		}
		if v, ok := blk.Headers[replacedAtHeader]; ok {
			if pk.ReplacedAt, err = time.Parse(time.RFC3339, v); err != nil {
				return nil, fmt.Errorf("%s: %s %q is not an RFC 3339 time (2006-01-02T15:04:05Z)", at, replacedAtHeader, v)
			}
			if pk.ReplacedAt.After(now.Add(maxClockSkew)) {
				return nil, fmt.Errorf("%s: %s %s is in the future (this machine's clock says %s): it would keep the key in use until %s",
					at, replacedAtHeader, v, now.UTC().Format(time.RFC3339), pk.UsableUntil().UTC().Format(time.RFC3339))
			}
		} else {
			pk.ReplacedAt, pk.FromModTime = fi.ModTime(), true
		}
		if pk.ID == key.ID {
			continue
		}
		if !slices.ContainsFunc(chain, func(e agentproto.Endorsement) bool { return e.Signer.Equal(pk.Public) }) {
			return nil, fmt.Errorf("%s, key %s, is not a key this signing key's chain %s names: give every replica the key file with its .chain and .previous together",
				at, pk.ID, ChainFile(keyFile))
		}
		out = append(out, pk)
	}
}

// RetiredFile is the file beside a signing key that holds the
// retirements of its predecessors.
func RetiredFile(keyFile string) string { return keyFile + ".retired" }

// LoadRetirements reads the retirements beside keyFile (none if there
// are none) and checks each: it verifies, and it does not retire key (a
// replica given an old key file with a newer retirement file would sign
// jobs every agent refuses).
func LoadRetirements(keyFile string, key SigningKey) ([]agentproto.Retirement, error) {
	path := RetiredFile(keyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read key retirements: %w", err)
	}
	var entries []chainEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("key retirements %s: %w", path, err)
	}
	out := make([]agentproto.Retirement, len(entries))
	for i, e := range entries {
		out[i] = agentproto.Retirement{Signer: e.Signer, Key: e.Key, Signature: e.Signature}
		if !out[i].Verify() {
			return nil, fmt.Errorf("key retirements %s: entry %d does not verify", path, i)
		}
		if out[i].Key.Equal(key.Public) {
			return nil, fmt.Errorf("key retirements %s retire this signing key %s: agents refuse it; give every replica the current key file", path, key.ID)
		}
	}
	return out, nil
}

// RetireOldKeys writes a retirement, signed by keyFile's key, of every
// older key in its chain that is not retired yet, and returns the keys it
// retired (none when there is nothing to retire).
func RetireOldKeys(keyFile string) (SigningKey, []ed25519.PublicKey, error) {
	key, err := LoadSigningKey(keyFile, false)
	if err != nil {
		return key, nil, err
	}
	chain, err := LoadKeyChain(keyFile, key)
	if err != nil {
		return key, nil, err
	}
	rs, err := LoadRetirements(keyFile, key)
	if err != nil {
		return key, nil, err
	}
	done := map[string]bool{}
	for _, r := range rs {
		done[agentproto.KeyID(r.Key)] = true
	}
	var retired []ed25519.PublicKey
	for _, e := range chain {
		for _, k := range []ed25519.PublicKey{e.Signer, e.Key} {
			if id := agentproto.KeyID(k); !k.Equal(key.Public) && !done[id] {
				done[id] = true
				rs = append(rs, agentproto.RetireKey(key.Private, k))
				retired = append(retired, k)
			}
		}
	}
	if len(retired) == 0 {
		return key, nil, nil
	}
	entries := make([]chainEntry, len(rs))
	for i, r := range rs {
		entries[i] = chainEntry{Signer: r.Signer, Key: r.Key, Signature: r.Signature}
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return key, nil, err
	}
	if err := atomicfile.Write(RetiredFile(keyFile), append(b, '\n'), 0o600); err != nil {
		return key, nil, fmt.Errorf("write key retirements: %w", err)
	}
	return key, retired, nil
}

// SignOffer fills in c's key id and signs the agent update offer.
func (k SigningKey) SignOffer(c *agentproto.UpdateOfferClaims) []byte {
	c.KeyID = k.ID
	return agentproto.SignUpdateOffer(k.Private, c)
}

// SignWithdrawal fills in c's key id and signs the withdrawal of an agent
// update offer.
func (k SigningKey) SignWithdrawal(c *agentproto.UpdateWithdrawalClaims) []byte {
	c.KeyID = k.ID
	return agentproto.SignUpdateWithdrawal(k.Private, c)
}
