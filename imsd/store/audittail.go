package store

import (
	"sync"

	"github.com/byoc-dev/byoc/internal/auditchain"
)

// auditTails keeps the newest records the SQLite writer committed to each
// audit chain, so that sending an agent the records its copy lacks
// (AuditRecordsAfter, before the answer to every ack) needs no read in
// the usual case: that read was an eighth of imsd's CPU per job with
// agents that keep a copy (docs/performance-store.md). The writer adds a
// batch's records once it committed and forgets everything when another
// connection committed to the file (checkHeads); a chain's tail holds
// only consecutive records, and a request it cannot answer whole goes to
// the database.
type auditTails struct {
	mu     sync.RWMutex
	chains map[string][]auditchain.Record // oldest first
}

const (
	// tailLen is how many records a chain's tail keeps: the records of
	// a job or two.
	tailLen = 8
	// maxTailChains bounds the chains with a tail (one is dropped, any,
	// to make room).
	maxTailChains = 4096
)

func newAuditTails() *auditTails { return &auditTails{chains: map[string][]auditchain.Record{}} }

// add appends committed records, in chain and seq order per chain, of
// the chains keep accepts (nil: all).
func (a *auditTails) add(rs []auditchain.Record, keep func(chain string) bool) {
	if len(rs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range rs {
		if keep != nil && !keep(r.Chain) {
			continue
		}
		t, ok := a.chains[r.Chain]
		if !ok && len(a.chains) >= maxTailChains {
			for k := range a.chains {
				delete(a.chains, k)
				break
			}
		}
		if len(t) > 0 && t[len(t)-1].Seq+1 != r.Seq {
			t = t[:0] // not consecutive: start again
		}
		if len(t) == 2*tailLen {
			t = t[:copy(t, t[tailLen:])]
		}
		a.chains[r.Chain] = append(t, r)
	}
}

// forget drops chains' tails.
func (a *auditTails) forget(chains []string) {
	if len(chains) == 0 {
		return
	}
	a.mu.Lock()
	for _, c := range chains {
		delete(a.chains, c)
	}
	a.mu.Unlock()
}

// reset forgets every tail.
func (a *auditTails) reset() {
	a.mu.Lock()
	clear(a.chains)
	a.mu.Unlock()
}

// after returns up to limit of chain's records after seq, when its tail
// holds every one of them up to the newest it knows (ok); else the caller
// reads them. With nonEmpty, a tail that holds nothing after seq does
// not answer either: where records may be appended that never reach the
// tail (PostgreSQL), only the database can say there are none.
func (a *auditTails) after(chain string, seq int64, limit int, nonEmpty bool) (rs []auditchain.Record, ok bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	t := a.chains[chain]
	if len(t) == 0 || t[0].Seq > seq+1 || t[len(t)-1].Seq < seq || nonEmpty && t[len(t)-1].Seq == seq {
		return nil, false
	}
	i := int(seq + 1 - t[0].Seq)
	n := min(len(t)-i, limit)
	return append([]auditchain.Record(nil), t[i:i+n]...), true
}
