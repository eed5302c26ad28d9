package auditlog

import (
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// A copy is covered by imsd's checkpoints up to the last one that checks;
// a record forged after it that links correctly is named, and so is a
// checkpoint not signed by a trusted key or not matching its record.
func TestCheckCheckpoints(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	keys := map[string]ed25519.PublicKey{agentproto.KeyID(pub): pub}
	var rs []auditchain.Record
	for i := range 3 {
		var prev *auditchain.Record
		if i > 0 {
			prev = &rs[i-1]
		}
		rs = append(rs, auditchain.Next(prev, auditchain.Record{Chain: "ins_1", At: int64(i), Kind: "job.queued", Actor: "imsd", Data: "{}"}))
	}
	sign := func(k ed25519.PrivateKey, r auditchain.Record) Checkpoint {
		return Checkpoint{Seq: r.Seq, Hash: r.Hash, KeyID: agentproto.KeyID(k.Public().(ed25519.PublicKey)),
			Signature: agentproto.SignAuditCheckpoint(k, "ins_1", r.Seq, r.Hash)}
	}
	path := filepath.Join(t.TempDir(), CheckpointFile)
	for _, cp := range []Checkpoint{sign(key, rs[1]), sign(key, rs[2])} {
		if err := AppendCheckpoint(path, cp); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := ReadCheckpoints(path)
	if err != nil || len(cps) != 2 {
		t.Fatalf("read back %d checkpoints: %v", len(cps), err)
	}
	if signed, err := CheckCheckpoints(rs, cps, "ins_1", keys); err != nil || signed != 3 {
		t.Fatalf("intact copy: signed %d, %v", signed, err)
	}
	forged := append(rs[:3:3], auditchain.Next(&rs[2], auditchain.Record{Chain: "ins_1", Kind: "job.acked", Actor: "agent:x", Data: "{}"}))
	_, err = CheckCheckpoints(forged, cps, "ins_1", keys)
	var u *Uncovered
	if !errors.As(err, &u) || u.Seq != 4 || u.Signed != 3 {
		t.Fatalf("a forged record that links: %v", err)
	}
	// Checkpoints that do not count: another key, another record's hash,
	// another chain's; only the first, valid one covers.
	bad := sign(key, rs[2])
	bad.Hash = rs[1].Hash
	otherChain := Checkpoint{Seq: 3, Hash: rs[2].Hash, KeyID: agentproto.KeyID(pub), Signature: agentproto.SignAuditCheckpoint(key, "ins_2", 3, rs[2].Hash)}
	for name, cp := range map[string]Checkpoint{"another key": sign(other, rs[2]), "hash swapped": bad, "another chain": otherChain} {
		_, err := CheckCheckpoints(rs, []Checkpoint{sign(key, rs[0]), cp}, "ins_1", keys)
		if !errors.As(err, &u) || u.Seq != 2 || !strings.Contains(err.Error(), "checkpoint 2") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// No checkpoint at all.
	if _, err := CheckCheckpoints(rs, nil, "ins_1", keys); !errors.As(err, &u) || u.Seq != 1 {
		t.Errorf("no checkpoints: %v", err)
	}
}
