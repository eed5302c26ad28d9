package auditlog

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/byoc-dev/byoc/internal/auditchain"
	"github.com/byoc-dev/byoc/rpc/agentproto"
)

// Checkpoints. The copy of the install's chain is a hash chain, which
// whoever can write the file can extend with records that link. imsd
// therefore signs the chain's head (agentproto.AuditCheckpointMessage)
// with its key each time it sends records, and once at each connection;
// the agent keeps each signature in CheckpointFile beside the copy, and
// agentd audit verify refuses a record no checkpoint covers (one whose
// seq is past every checkpoint whose record it matches).

// CheckpointFile holds imsd's checkpoints of the copy, in Dir.
const CheckpointFile = "install.checkpoints.jsonl"

// Checkpoint is imsd's signature over the chain's record Seq, whose hash
// is Hash.
type Checkpoint struct {
	Seq       int64  `json:"seq"`
	Hash      string `json:"hash"`
	KeyID     string `json:"key_id"`
	Signature []byte `json:"signature"`
}

// AppendCheckpoint appends cp to the file at path and syncs it.
func AppendCheckpoint(path string, cp Checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit checkpoints: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("audit checkpoints %s: %w", path, err)
	}
	return nil
}

// ReadCheckpoints returns the checkpoints in the file at path (none if it
// is missing). A torn last line is left out; a line that is not a
// checkpoint is an error naming it.
func ReadCheckpoints(path string) ([]Checkpoint, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Checkpoint
	for line := 1; len(b) > 0; line++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn
		}
		var cp Checkpoint
		if err := json.Unmarshal(b[:i], &cp); err != nil {
			return nil, fmt.Errorf("%s:%d: not a checkpoint: %w", path, line, err)
		}
		out = append(out, cp)
		b = b[i+1:]
	}
	return out, nil
}

// Uncovered is a copy whose records from Seq on are covered by no valid
// checkpoint of imsd.
type Uncovered struct {
	// Seq is the first record no checkpoint covers; Signed the last that
	// one does (0: none).
	Seq, Signed int64
	// Why lists checkpoints that did not count, and why.
	Why []string
}

func (u *Uncovered) Error() string {
	s := fmt.Sprintf("record %d and those after it carry no signature of imsd (records up to %d do)", u.Seq, u.Signed)
	if u.Signed == 0 {
		s = fmt.Sprintf("record %d and those after it carry no signature of imsd (no checkpoint verifies)", u.Seq)
	}
	for _, w := range u.Why {
		s += "; " + w
	}
	return s + ": a record added to the copy by someone other than imsd, or received just before the agent stopped (imsd signs the head again at the next connection)"
}

// CheckCheckpoints returns the last record of rs (a copy of chain that
// auditchain.Verify accepts) that a checkpoint signed by one of keys
// covers, and an *Uncovered if a record comes after it.
func CheckCheckpoints(rs []auditchain.Record, cps []Checkpoint, chain string, keys map[string]ed25519.PublicKey) (int64, error) {
	bySeq := make(map[int64]string, len(rs))
	for _, r := range rs {
		bySeq[r.Seq] = r.Hash
	}
	var signed int64
	var why []string
	for i, cp := range cps {
		switch h, ok := bySeq[cp.Seq]; {
		case !agentproto.VerifyAuditCheckpoint(keys, cp.KeyID, chain, cp.Seq, cp.Hash, cp.Signature):
			why = append(why, fmt.Sprintf("checkpoint %d (record %d) is not signed by a key of imsd this agent trusts", i+1, cp.Seq))
		case !ok:
			// A checkpoint past the copy's end: the copy lost records.
			why = append(why, fmt.Sprintf("checkpoint %d names record %d, which the copy does not hold", i+1, cp.Seq))
		case h != cp.Hash:
			why = append(why, fmt.Sprintf("checkpoint %d: record %d's hash is not the one imsd signed", i+1, cp.Seq))
		default:
			signed = max(signed, cp.Seq)
		}
	}
	if len(rs) > 0 && rs[len(rs)-1].Seq > signed {
		first := rs[0].Seq
		for _, r := range rs {
			if r.Seq > signed {
				first = r.Seq
				break
			}
		}
		return signed, &Uncovered{Seq: first, Signed: signed, Why: why}
	}
	if len(why) > 0 {
		return signed, errors.New(strings.Join(why, "; "))
	}
	return signed, nil
}
