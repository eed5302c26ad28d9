package auth

import (
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

// RotateSigningKey replaces the key in keyFile with a new one and appends
// its endorsement by the old key to the chain file, and the old key
// itself to the previous-keys file (PreviousFile), both written first: a
// crash in between leaves the old key, an endorsement nobody uses and a
// previous key that is the current one (LoadPreviousKeys skips it).
// It returns the old and the new key. A running imsd keeps signing with
// the key it loaded until it restarts.
func RotateSigningKey(keyFile string) (old, next SigningKey, err error) {
	old, err = LoadSigningKey(keyFile, false)
	if err != nil {
		return old, next, err
	}
	chain, err := LoadKeyChain(keyFile, old)
	if err != nil {
		return old, next, err
	}
	// Read before anything is written: a previous-keys file imsd would
	// refuse stops the rotation here.
	if _, err := LoadPreviousKeys(keyFile, old, chain); err != nil {
		return old, next, err
	}
	prev, err := os.ReadFile(PreviousFile(keyFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return old, next, fmt.Errorf("read previous keys: %w", err)
	}
	oldDER, err := x509.MarshalPKCS8PrivateKey(old.Private)
	if err != nil {
		return old, next, err
	}
	prev = append(prev, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: oldDER})...)
	if err := atomicfile.Write(PreviousFile(keyFile), prev, 0o600); err != nil {
		return old, next, fmt.Errorf("write previous keys: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return old, next, err
	}
	next = NewSigningKey(priv)
	chain = append(chain, agentproto.EndorseKey(old.Private, next.Public))
	entries := make([]chainEntry, len(chain))
	for i, e := range chain {
		entries[i] = chainEntry{Signer: e.Signer, Key: e.Key, Signature: e.Signature}
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return old, next, err
	}
	if err := atomicfile.Write(ChainFile(keyFile), append(b, '\n'), 0o600); err != nil {
		return old, next, fmt.Errorf("write key chain: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return old, next, err
	}
	if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return old, next, fmt.Errorf("write signing key %s: %w", keyFile, err)
	}
	return old, next, nil
}

// PreviousFile is the file beside a signing key that holds the keys it
// replaced (RotateSigningKey), PEM "PRIVATE KEY" blocks, oldest first.
// imsd opens and checks with them the results of offline bundles made
// before a rotation (their jobs come back sealed to the key that signed
// them); it signs nothing with them.
func PreviousFile(keyFile string) string { return keyFile + ".previous" }

// LoadPreviousKeys reads the previous keys beside keyFile (none if there
// is no such file). Each must be a key imsd held: one that endorsed its
// successor in chain (LoadKeyChain's). An entry that is key itself (a
// rotation interrupted before it replaced the key file) is skipped.
// Errors name the file and the entry.
func LoadPreviousKeys(keyFile string, key SigningKey, chain []agentproto.Endorsement) ([]SigningKey, error) {
	path := PreviousFile(keyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read previous keys: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("previous keys %s: mode %o lets others read them; chmod 600 it", path, fi.Mode().Perm())
	}
	var out []SigningKey
	for i := 1; ; i++ {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			if len(strings.TrimSpace(string(b))) > 0 {
				return nil, fmt.Errorf("previous keys %s: entry %d: not a PEM block", path, i)
			}
			return out, nil
		}
		if blk.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("previous keys %s: entry %d: a %q block, want \"PRIVATE KEY\" (PKCS#8 Ed25519)", path, i, blk.Type)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("previous keys %s: entry %d: %w", path, i, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("previous keys %s: entry %d: a %T, want an Ed25519 key", path, i, k)
		}
		pk := NewSigningKey(priv)
		if pk.ID == key.ID {
			continue
		}
		if !slices.ContainsFunc(chain, func(e agentproto.Endorsement) bool { return e.Signer.Equal(pk.Public) }) {
			return nil, fmt.Errorf("previous keys %s: entry %d, key %s, is not a key this signing key's chain %s names: give every replica the key file with its .chain and .previous together",
				path, i, pk.ID, ChainFile(keyFile))
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
