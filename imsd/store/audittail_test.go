package store

import (
	"testing"

	"github.com/byoc-dev/byoc/internal/auditchain"
)

func recs(chain string, from, to int64) []auditchain.Record {
	var out []auditchain.Record
	for s := from; s <= to; s++ {
		out = append(out, auditchain.Record{Chain: chain, Seq: s})
	}
	return out
}

// A tail answers only what it holds whole: every record after the seq
// asked, up to the newest it knows; anything else goes to the database.
func TestAuditTails(t *testing.T) {
	a := newAuditTails()
	a.add(recs("c", 1, 20), nil) // keeps the newest, at least tailLen
	a.add(recs("d", 5, 6), nil)
	for _, tc := range []struct {
		chain      string
		after      int64
		limit      int
		ok         bool
		first, num int64
	}{
		{"c", 19, 100, true, 20, 1},
		{"c", 20, 100, true, 0, 0}, // nothing new
		{"c", 14, 3, true, 15, 3},  // limited
		{"c", 2, 100, false, 0, 0}, // older than the tail
		{"c", 21, 100, false, 0, 0},
		{"d", 4, 100, true, 5, 2},
		{"d", 3, 100, false, 0, 0},
		{"e", 0, 100, false, 0, 0},
	} {
		rs, ok := a.after(tc.chain, tc.after, tc.limit, false)
		if ok != tc.ok || int64(len(rs)) != tc.num || (len(rs) > 0 && rs[0].Seq != tc.first) {
			t.Errorf("after(%s, %d, %d) = %d records from %v, %v; want %d from %d, %v", tc.chain, tc.after, tc.limit, len(rs), rs, ok, tc.num, tc.first, tc.ok)
		}
	}
	// A gap starts the tail again; reset forgets everything.
	a.add(recs("d", 9, 9), nil)
	if _, ok := a.after("d", 6, 100, false); ok {
		t.Error("a tail with a gap answered")
	}
	if rs, ok := a.after("d", 8, 100, false); !ok || len(rs) != 1 {
		t.Errorf("after the gap: %v %v", rs, ok)
	}
	a.reset()
	if _, ok := a.after("c", 19, 100, false); ok {
		t.Error("answered after reset")
	}
}

// Where records may be appended that never reach the tail (PostgreSQL:
// other replicas, writes of their own), a tail answers only with
// records: "nothing new" is the database's to say. A chain the keep
// function refuses gets no tail; forget drops chains.
func TestAuditTailsNonEmpty(t *testing.T) {
	a := newAuditTails()
	a.add(append(recs("c", 1, 3), recs("v", 1, 2)...), func(chain string) bool { return chain != "v" })
	if rs, ok := a.after("c", 1, 100, true); !ok || len(rs) != 2 || rs[0].Seq != 2 {
		t.Errorf("after(c, 1) = %v, %v; want records 2 and 3", rs, ok)
	}
	if rs, ok := a.after("c", 3, 100, true); ok {
		t.Errorf("after(c, 3), nothing in the tail, answered %v", rs)
	}
	if _, ok := a.after("v", 0, 100, true); ok {
		t.Error("a chain keep refused has a tail")
	}
	a.forget([]string{"c"})
	if _, ok := a.after("c", 1, 100, true); ok {
		t.Error("a forgotten chain's tail answered")
	}
}
