// Package auditchain is the hash chain of byoc's audit events: the
// canonical encoding of a record, its hash, and the verifier that names
// the first record of a chain that was changed, removed or inserted.
//
// A record's hash is the lowercase hex SHA-256 of its fields in this
// order: chain, seq, at, kind, actor, subject, data, prev, each written
// as its length in bytes (decimal), a colon, its UTF-8 bytes and a comma
// (seq and at as decimal integers, at in Unix nanoseconds; data is the
// stored JSON text, hashed as it is, never re-encoded). prev is the hash
// of the record before it in the same chain, "" for the first (seq 1).
// For example kind "job.acked" contributes "9:job.acked,". A customer can
// check an export with a few lines of any language (docs/operator/audit.md).
//
// It imports only the standard library, so the CLI, imsd and agentd can
// share it.
package auditchain

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// Record is one audit event as chained and exported (one JSON object per
// line in an export).
type Record struct {
	// Chain is the install id, or "" for vendor-wide events.
	Chain string `json:"chain"`
	// Seq numbers a chain's records from 1, without gaps.
	Seq int64 `json:"seq"`
	// At is when the event happened, in Unix nanoseconds.
	At      int64  `json:"at"`
	Kind    string `json:"kind"`
	Actor   string `json:"actor"`
	Subject string `json:"subject"`
	// Data is a JSON object of string values, as stored.
	Data string `json:"data"`
	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// Hash returns r's hash (r.Hash itself is not part of it).
func Hash(r Record) string {
	h := sha256.New()
	buf := make([]byte, 0, 256)
	field := func(s string) {
		buf = strconv.AppendInt(buf[:0], int64(len(s)), 10)
		buf = append(buf, ':')
		buf = append(buf, s...)
		buf = append(buf, ',')
		h.Write(buf)
	}
	field(r.Chain)
	field(strconv.FormatInt(r.Seq, 10))
	field(strconv.FormatInt(r.At, 10))
	field(r.Kind)
	field(r.Actor)
	field(r.Subject)
	field(r.Data)
	field(r.Prev)
	return hex.EncodeToString(h.Sum(nil))
}

// Next fills in r's Seq, Prev and Hash to follow prev (nil for the first
// record of a chain) and returns it.
func Next(prev *Record, r Record) Record {
	r.Seq, r.Prev = 1, ""
	if prev != nil {
		r.Seq, r.Prev = prev.Seq+1, prev.Hash
	}
	r.Hash = Hash(r)
	return r
}

// Problem is the first record of a chain that does not verify.
type Problem struct {
	Chain string
	// Seq is the record's number: the changed or inserted record, or the
	// first one missing.
	Seq int64
	// What is "changed", "removed" or "inserted".
	What string
	// Detail says how it was found.
	Detail string
}

func (p *Problem) Error() string {
	chain := p.Chain
	if chain == "" {
		chain = "vendor"
	}
	return fmt.Sprintf("chain %s: record %d %s (%s)", chain, p.Seq, p.What, p.Detail)
}

// Verify checks one chain's records, given in seq order from seq 1, and
// returns the first problem, or nil when every record is intact and
// linked to the one before it.
func Verify(rs []Record) *Problem {
	var v Verifier
	for _, r := range rs {
		if p := v.Add(r); p != nil {
			return p
		}
	}
	return nil
}

// Verifier is Verify one record at a time, for a chain too long to hold:
// it keeps the last two records only. Its zero value expects record 1.
type Verifier struct {
	p, pp *Record
}

// Add checks r, the chain's next record, and returns the problem Verify
// would name for it (nil: intact and linked). After a problem the
// Verifier is not to be used again.
func (v *Verifier) Add(r Record) *Problem {
	p, pp := v.p, v.pp
	want := int64(1)
	if p != nil {
		want = p.Seq + 1
	}
	bad := func(seq int64, what, detail string, args ...any) *Problem {
		return &Problem{Chain: r.Chain, Seq: seq, What: what, Detail: fmt.Sprintf(detail, args...)}
	}
	if p != nil && r.Chain != p.Chain {
		return bad(r.Seq, "inserted", "it names chain %q", r.Chain)
	}
	if r.Seq > want {
		return bad(want, "removed", "the chain goes from record %d to record %d", want-1, r.Seq)
	}
	if r.Seq < want {
		return bad(r.Seq, "inserted", "a second record %d", r.Seq)
	}
	prevHash := ""
	if p != nil {
		prevHash = p.Hash
	}
	if r.Prev != prevHash {
		switch {
		case pp != nil && r.Prev == pp.Hash:
			return bad(p.Seq, "inserted", "record %d links to record %d, not to it", r.Seq, pp.Seq)
		case p != nil && Hash(r) == r.Hash:
			return bad(p.Seq, "changed", "record %d, intact, links to another hash", r.Seq)
		default:
			return bad(r.Seq, "changed", "its prev is not the hash of the record before it")
		}
	}
	if Hash(r) != r.Hash {
		return bad(r.Seq, "changed", "its content does not match its hash")
	}
	v.pp, v.p = p, &r
	return nil
}
