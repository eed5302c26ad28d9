package agentproto

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
)

// batchOf makes n claims, one per agent of install ins_1 (job_i for agt_i),
// signs them in one batch and returns the claims, signature and proofs.
func batchOf(t testing.TB, key ed25519.PrivateKey, pub ed25519.PublicKey, n int) ([]*JobClaims, []byte, []JobBatchProof) {
	t.Helper()
	cs := make([]*JobClaims, n)
	for i := range cs {
		c := testClaimsFor(pub)
		c.JobID, c.AgentID, c.FencingToken = fmt.Sprintf("job_%d", i), fmt.Sprintf("agt_%d", i), int64(100+i)
		cs[i] = &c
	}
	sig, proofs, err := SignJobBatch(key, cs)
	if err != nil {
		t.Fatal(err)
	}
	return cs, sig, proofs
}

func testClaimsFor(pub ed25519.PublicKey) JobClaims {
	d, _ := ConfigDigest(map[string]any{"n": 3.0})
	return JobClaims{KeyID: KeyID(pub), InstallID: "ins_1", AgentID: "agt_1", JobID: "job_1", Attempt: 1, FencingToken: 77,
		ComponentType: "action", Operation: "apply", TimeoutSeconds: 600, ConfigDigest: d, Expires: t0.Add(35_000_000_000)}
}

// Every job of batches of every size from 2 to 70 verifies with its own
// proof, and with no other job's.
func TestJobBatchEveryLeafVerifies(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	for n := 2; n <= 70; n++ {
		cs, sig, proofs := batchOf(t, key, pub, n)
		for i, c := range cs {
			if err := VerifyJobBatch(keys, c, sig, proofs[i], t0); err != nil {
				t.Fatalf("size %d, leaf %d: a good proof was refused: %v", n, i, err)
			}
			// Another job's proof, for this job.
			j := (i + 1) % n
			if err := VerifyJobBatch(keys, c, sig, proofs[j], t0); err == nil {
				t.Fatalf("size %d: leaf %d verified with leaf %d's proof", n, i, j)
			}
		}
	}
}

// The root is RFC 9162's MTH: checked against a direct recursive
// computation.
func TestJobBatchRootIsRFC9162(t *testing.T) {
	var mth func(ls [][]byte) [32]byte
	mth = func(ls [][]byte) [32]byte {
		if len(ls) == 1 {
			return sha256.Sum256(append([]byte{0}, ls[0]...))
		}
		k := 1
		for k*2 < len(ls) {
			k *= 2
		}
		l, r := mth(ls[:k]), mth(ls[k:])
		return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	for _, n := range []int{2, 3, 5, 8, 13} {
		cs, sig, proofs := batchOf(t, key, pub, n)
		msgs := make([][]byte, n)
		for i, c := range cs {
			msgs[i] = c.Message()
		}
		want := mth(msgs)
		for i, c := range cs {
			got, err := RootFromProof(c.Message(), proofs[i].Index, proofs[i].Size, proofs[i].Path)
			if err != nil || got != want {
				t.Fatalf("size %d leaf %d: root %x, %v; want %x", n, i, got, err, want)
			}
		}
		if !ed25519.Verify(pub, batchRootMessage(uint64(n), want), sig) {
			t.Fatalf("size %d: the signature is not over the context, size and root", n)
		}
	}
}

// What an attacker on the path could try with a batch signature, each
// refused.
func TestJobBatchRefusals(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	cs, sig, proofs := batchOf(t, key, pub, 6)
	c, p := cs[4], proofs[4]
	cp := func(p JobBatchProof) JobBatchProof {
		p.Path = append([][]byte(nil), p.Path...)
		return p
	}
	otherInstall := *c
	otherInstall.InstallID = "ins_2"
	otherAgent := *c
	otherAgent.AgentID = "agt_1" // a job of the batch signed for agt_4, presented to agt_1
	otherJob := *c
	otherJob.JobID = "job_9"
	_, otherSig, otherProofs := func() ([]*JobClaims, []byte, []JobBatchProof) {
		cs2 := make([]*JobClaims, 4)
		for i := range cs2 {
			x := testClaimsFor(pub)
			x.JobID = fmt.Sprintf("other_%d", i)
			cs2[i] = &x
		}
		s, ps, err := SignJobBatch(key, cs2)
		if err != nil {
			t.Fatal(err)
		}
		return cs2, s, ps
	}()
	truncated := cp(p)
	truncated.Path = truncated.Path[:len(truncated.Path)-1]
	extended := cp(p)
	extended.Path = append(extended.Path, make([]byte, 32))
	shortHash := cp(p)
	shortHash.Path[0] = shortHash.Path[0][:31]
	flipped := cp(p)
	flipped.Path[0] = append([]byte(nil), flipped.Path[0]...)
	flipped.Path[0][0] ^= 1
	wrongIndex := cp(p)
	wrongIndex.Index = 5
	wrongSize := cp(p)
	wrongSize.Size = 7
	indexPastSize := cp(p)
	indexPastSize.Index = 6
	oneLeaf := JobBatchProof{Index: 0, Size: 1}
	pub2, _, _ := ed25519.GenerateKey(nil)
	unknownKey := *c
	unknownKey.KeyID = KeyID(pub2)
	single := SignJob(key, c) // a single-job signature presented as a batch's

	for _, tc := range []struct {
		name string
		c    *JobClaims
		sig  []byte
		p    JobBatchProof
		want error
	}{
		{"another install", &otherInstall, sig, p, ErrBadSignature},
		{"another agent", &otherAgent, sig, p, ErrBadSignature},
		{"another job", &otherJob, sig, p, ErrBadSignature},
		{"another batch's root signature", c, otherSig, p, ErrBadSignature},
		{"another batch's proof", c, sig, otherProofs[0], ErrBadSignature},
		{"truncated proof", c, sig, truncated, ErrBadProof},
		{"extended proof", c, sig, extended, ErrBadProof},
		{"a 31-byte hash", c, sig, shortHash, ErrBadProof},
		{"a hash changed", c, sig, flipped, ErrBadSignature},
		{"another index", c, sig, wrongIndex, ErrBadSignature},
		{"another size", c, sig, wrongSize, ErrBadProof},
		{"index past the size", c, sig, indexPastSize, ErrBadProof},
		{"a batch of one", c, sig, oneLeaf, ErrBadProof},
		{"no signature", c, nil, p, ErrUnsigned},
		{"unknown key", &unknownKey, sig, p, ErrUnknownKey},
		{"a single-job signature as the root's", c, single, p, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyJobBatch(keys, tc.c, tc.sig, tc.p, t0)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if err := VerifyJobBatch(keys, c, sig, p, c.Expires.Add(1_000_000)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: got %v", err)
	}
	// A root signature is no job signature: the root message under the
	// single-job check fails.
	if err := VerifyJob(keys, c, sig, t0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a batch signature passed as a single job's: %v", err)
	}
}

// A leaf presented as a node: the subtree of leaves 0 and 1 of a batch of 4
// has the hash node(leaf0, leaf1); its preimage (the two leaf hashes), given
// as a leaf message at index 0 of a tree of 2 with the other subtree as
// proof, would reach the root if leaves and nodes were hashed alike. Leaves
// are hashed with 0x00 and nodes with 0x01, so it does not; and the agent
// never passes a hash as a leaf, only its own claims' message.
func TestJobBatchNodeAsLeafRefused(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	cs, sig, proofs := batchOf(t, key, pub, 4)
	l0, l1 := leafHash(cs[0].Message()), leafHash(cs[1].Message())
	root, err := RootFromProof(cs[0].Message(), 0, 4, proofs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	inner := append(append([]byte(nil), l0[:]...), l1[:]...)
	got, err := RootFromProof(inner, 0, 2, proofs[0].Path[1:])
	if err == nil && got == root {
		t.Fatal("an inner node's preimage, presented as a leaf, reached the root")
	}
	if !ed25519.Verify(pub, batchRootMessage(4, root), sig) {
		t.Fatal("the root does not verify")
	}
}

func TestSignJobBatchSizes(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	c := testClaimsFor(pub)
	if _, _, err := SignJobBatch(key, []*JobClaims{&c}); err == nil {
		t.Fatal("a batch of one was signed: it must take a single signature")
	}
}

// FuzzJobBatchProof: no proof but the real one verifies, and the verifier
// never panics.
func FuzzJobBatchProof(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{KeyID(pub): pub}
	cs, sig, proofs := batchOf(f, key, pub, 7)
	flat := func(p [][]byte) []byte {
		var b []byte
		for _, h := range p {
			b = append(b, h...)
		}
		return b
	}
	for i := range cs {
		f.Add(uint8(i), proofs[i].Index, proofs[i].Size, flat(proofs[i].Path), uint8(32))
	}
	f.Add(uint8(0), uint64(0), uint64(1), []byte{}, uint8(32))
	f.Add(uint8(3), uint64(3), uint64(1<<63), make([]byte, 64), uint8(31))
	f.Fuzz(func(t *testing.T, leaf uint8, index, size uint64, path []byte, hashLen uint8) {
		c := cs[int(leaf)%len(cs)]
		var p [][]byte
		if hashLen == 0 {
			hashLen = 1
		}
		for len(path) > 0 && len(p) < 64 {
			n := min(int(hashLen), len(path))
			p = append(p, path[:n])
			path = path[n:]
		}
		err := VerifyJobBatch(keys, c, sig, JobBatchProof{Index: index, Size: size, Path: p}, t0)
		want := proofs[int(leaf)%len(cs)]
		real := index == want.Index && size == want.Size && len(p) == len(want.Path)
		for i := 0; real && i < len(p); i++ {
			real = string(p[i]) == string(want.Path[i])
		}
		if err == nil && !real {
			t.Fatalf("a forged proof verified: index %d size %d path %x", index, size, p)
		}
		if err != nil && real {
			t.Fatalf("the real proof was refused: %v", err)
		}
	})
}

func BenchmarkJobBatchSign100(b *testing.B) {
	pub, key, _ := ed25519.GenerateKey(nil)
	cs, _, _ := batchOf(b, key, pub, 100)
	for b.Loop() {
		if _, _, err := SignJobBatch(key, cs); err != nil {
			b.Fatal(err)
		}
	}
}
