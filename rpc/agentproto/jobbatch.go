package agentproto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Batch job signatures. When imsd hands out many assignments at once (a
// batch enqueue's jobs, committed together), it signs them all with one
// Ed25519 signature: the leaves of a Merkle tree are the jobs' messages
// (JobClaims.Message, each for its own agent), the tree is RFC 9162's
// (section 2.1.1: SHA-256, a leaf hashed as 0x00 || message, a node as
// 0x01 || left || right, the left subtree the largest power of two
// smaller than the size), and imsd signs
//
//	"byoc job batch signature v1\0" || tree size (8 bytes, big-endian) || root (32 bytes)
//
// Each assignment carries that signature, its leaf's index, the tree's
// size and the inclusion proof (RFC 9162 section 2.1.3). The agent
// recomputes its leaf from the assignment's claims with its own agent id,
// exactly as for a single signature, and so checks everything a single
// signature checks; the context string keeps a root signature from
// passing for a job signature (whose message starts "byoc job signature
// v2\0") and the other way round.

// jobBatchContext binds a batch signature to its purpose and version.
const jobBatchContext = "byoc job batch signature v1\x00"

// MaxJobBatch is the most leaves a batch signature may cover; a proof is
// then at most 16 hashes.
const MaxJobBatch = 1 << 16

// maxProofLen is the longest inclusion proof of a tree of MaxJobBatch
// leaves.
const maxProofLen = 16

// ErrBadProof refuses a batch signature whose inclusion proof does not
// lead from the job's leaf to a root of the size it claims.
var ErrBadProof = errors.New("the batch signature's inclusion proof does not match the assignment (tampered with, or not signed by imsd)")

func leafHash(msg []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(msg)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func nodeHash(left, right []byte) [32]byte {
	var b [65]byte
	b[0] = 1
	copy(b[1:33], left)
	copy(b[33:], right)
	return sha256.Sum256(b[:])
}

// batchRootMessage is what the batch signature covers.
func batchRootMessage(size uint64, root [32]byte) []byte {
	b := make([]byte, 0, len(jobBatchContext)+8+32)
	b = append(b, jobBatchContext...)
	b = binary.BigEndian.AppendUint64(b, size)
	return append(b, root[:]...)
}

// JobBatchProof is one job's place in a batch signature.
type JobBatchProof struct {
	// Index is the job's leaf index, Size the number of leaves.
	Index, Size uint64
	// Path is the inclusion proof, from the leaf's sibling upwards.
	Path [][]byte
}

// SignJobBatch signs the jobs cs with one signature and returns it with
// each job's proof (in the order of cs). It needs at least two jobs and at
// most MaxJobBatch; each claims' KeyID must already be set.
func SignJobBatch(key ed25519.PrivateKey, cs []*JobClaims) ([]byte, []JobBatchProof, error) {
	n := len(cs)
	if n < 2 || n > MaxJobBatch {
		return nil, nil, fmt.Errorf("a batch signature covers 2 to %d jobs, not %d", MaxJobBatch, n)
	}
	leaves := make([][32]byte, n)
	for i, c := range cs {
		leaves[i] = leafHash(c.Message())
	}
	proofs := make([]JobBatchProof, n)
	// One backing array for every path: a leaf is at most ceil(log2 n)
	// levels down.
	depth := bits.Len(uint(n - 1))
	paths := make([][]byte, n*depth)
	for i := range proofs {
		proofs[i].Index, proofs[i].Size = uint64(i), uint64(n)
		proofs[i].Path = paths[i*depth : i*depth : (i+1)*depth]
	}
	root := buildTree(leaves, proofs)
	return ed25519.Sign(key, batchRootMessage(uint64(n), root)), proofs, nil
}

// buildTree returns the root of leaves (RFC 9162's MTH) and appends, to
// the proof of each leaf (proofs[i] is leaf lo+i's), the sibling hashes
// on its way up, lowest first.
func buildTree(leaves [][32]byte, proofs []JobBatchProof) [32]byte {
	n := len(leaves)
	if n == 1 {
		return leaves[0]
	}
	k := 1 << (bits.Len(uint(n-1)) - 1) // the largest power of two < n
	l := buildTree(leaves[:k], proofs[:k])
	r := buildTree(leaves[k:], proofs[k:])
	ls, rs := l[:], r[:] // every proof below shares these
	for i := range proofs[:k] {
		proofs[i].Path = append(proofs[i].Path, rs)
	}
	for i := range proofs[k:] {
		proofs[k+i].Path = append(proofs[k+i].Path, ls)
	}
	return nodeHash(ls, rs)
}

// RootFromProof returns the root of a tree of size leaves whose leaf
// index holds the message leaf, following the inclusion proof path (RFC
// 9162 section 2.1.3.2). It fails unless index < size <= MaxJobBatch,
// every hash is 32 bytes and path is exactly as long as the leaf's way to
// the root. The leaf is a message, hashed here as a leaf, never a hash:
// an inner node cannot be presented as a leaf.
func RootFromProof(leaf []byte, index, size uint64, path [][]byte) ([32]byte, error) {
	if size < 2 || size > MaxJobBatch || index >= size || len(path) > maxProofLen {
		return [32]byte{}, ErrBadProof
	}
	fn, sn := index, size-1
	r := leafHash(leaf)
	for _, p := range path {
		if len(p) != 32 || sn == 0 {
			return [32]byte{}, ErrBadProof
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r[:])
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = nodeHash(r[:], p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return [32]byte{}, ErrBadProof
	}
	return r, nil
}

// VerifyJobBatch is VerifyJob for a job signed in a batch: sig is the
// batch's signature, p the job's proof. It refuses exactly what VerifyJob
// refuses (unsigned, unknown key, any claim changed, expired), and a proof
// that does not lead to the signed root.
func VerifyJobBatch(keys map[string]ed25519.PublicKey, c *JobClaims, sig []byte, p JobBatchProof, now time.Time) error {
	if len(sig) == 0 {
		return ErrUnsigned
	}
	pub, ok := keys[c.KeyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w %q", ErrUnknownKey, c.KeyID)
	}
	root, err := RootFromProof(c.Message(), p.Index, p.Size, p.Path)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, batchRootMessage(p.Size, root), sig) {
		return ErrBadSignature
	}
	if now.UnixMilli() > c.Expires.UnixMilli() {
		return fmt.Errorf("%w: it expired at %s and this machine's clock says %s (if the clocks disagree, fix them)",
			ErrExpired, c.Expires.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
