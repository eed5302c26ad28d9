package store

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/byoc-dev/byoc/internal/auditchain"
)

// pgHeads caches, on PostgreSQL, the head (last seq and hash) of each
// install's audit chain as this imsd last committed it, so that the
// group commit appends to the chains of a batch without reading their
// heads: their advisory locks are then taken by the insert itself, one
// statement where there were two, and no chain's last record is looked
// up (docs/performance-river.md, 2026-11-29).
//
// What keeps the chains whole:
//
//   - Every appender still takes each chain's advisory lock before its
//     records go in (the group commit from its cache too), so whoever
//     holds a chain's lock and reads its head reads the chain's last
//     record: a write of its own (flushAudit), a batch that holds a head
//     the cache does not, another replica, an older imsd.
//   - A cached head another replica moved on makes the insert of the
//     next seq a violation of the chain's primary key (chain, seq): the
//     batch's heads are dropped from the cache and the batch runs again,
//     reading them under their locks. The last try of a batch never uses
//     the cache, so it cannot fail that way.
//   - Inside one imsd, a stripe lock per chain is held from the heads'
//     use to the end of the transaction (commit or rollback), by the
//     group commit's lanes and writes of their own alike, so the cache
//     is never read while a transaction of this process may still move
//     the chain. Stripes are taken in index order, after the write's
//     row locks, and before the chain's advisory lock.
//   - A head joins the cache only after a commit this process saw
//     succeed, and only if nothing emptied the cache since it was read
//     (gen): a failed commit drops the batch's chains, a new connection
//     to the server (a failover or a restore comes with new
//     connections) empties the cache. Audit records are append-only
//     (migration 12's triggers), so a head never moves back otherwise.
//
// The vendor chain is never cached: every replica and most operator
// calls append to it, so a cached head would mostly be stale.
//
// tails keeps, beside the heads and under the same rules (joined after a
// commit seen to succeed, dropped with its chain or the whole cache),
// the records the group commit appended, for agents that keep a copy of
// their install's chain: sending them the records they lack, before the
// answer to every ack, read the chain each time (at 20,000 jobs, as
// much PostgreSQL CPU again as the jobs themselves). Records that other
// replicas or this process's writes of their own appended are not in a
// tail, so on PostgreSQL a tail answers only with at least one record
// (auditTails.after's nonEmpty): "nothing after seq" is the database's
// to say.
type pgHeads struct {
	seed    maphash.Seed
	stripes [pgHeadStripes]sync.Mutex

	mu    sync.Mutex
	gen   uint64
	heads map[string]chainHead
	tails *auditTails

	// hits counts the heads the group commit took from the cache, stale
	// the batches run again because one of them was behind (tests and
	// docs/performance-river.md).
	hits, stale atomic.Int64
}

// pgHeadStripes is how many stripe locks the chains share: a batch of
// 256 writes touches at most that many chains, so with 1,024 stripes
// two lanes' batches seldom wait on a stripe neither needs.
const pgHeadStripes = 1024

// pgHeadsMax bounds the cache: past it, the cache is emptied and fills
// again with the chains in use (an install's chain costs about 150
// bytes here).
const pgHeadsMax = 200_000

func newPGHeads() *pgHeads {
	return &pgHeads{seed: maphash.MakeSeed(), heads: map[string]chainHead{}, tails: newAuditTails()}
}

// cacheable reports whether chain's head may be cached.
func cacheable(chain string) bool { return chain != VendorChain }

// heldStripes is the set of stripe locks a transaction holds, released
// once it ended.
type heldStripes struct {
	h      *pgHeads
	idx    []int
	chains []string
	gen    uint64
}

// lock takes the stripes of chains, in index order, and returns them
// with the cache's generation at that time.
func (h *pgHeads) lock(chains []string) *heldStripes {
	idx := make([]int, 0, len(chains))
	for _, c := range chains {
		idx = append(idx, int(maphash.String(h.seed, c)%pgHeadStripes))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		h.stripes[i].Lock()
	}
	h.mu.Lock()
	gen := h.gen
	h.mu.Unlock()
	return &heldStripes{h: h, idx: idx, chains: chains, gen: gen}
}

// get returns chain's cached head. The caller holds chain's stripe.
func (h *pgHeads) get(chain string) (chainHead, bool) {
	if !cacheable(chain) {
		return chainHead{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.heads[chain]
	if ok {
		h.hits.Add(1)
	}
	return c, ok
}

// release ends a transaction's hold, once it committed or rolled back:
// committed, its new heads join the cache (unless the cache was dropped
// since the stripes were taken); otherwise the chains it locked are
// dropped, since their heads are unknown now (a commit that failed may
// have committed). The records appended (recs, in chain and seq order)
// join or leave the tails alike. Then the stripes are unlocked.
func (s *heldStripes) release(committed bool, heads []chainHead, recs []auditchain.Record) {
	if s == nil {
		return
	}
	h := s.h
	h.mu.Lock()
	if committed && h.gen == s.gen {
		if len(h.heads)+len(heads) > pgHeadsMax {
			clear(h.heads)
		}
		for _, c := range heads {
			if cacheable(c.chain) {
				h.heads[c.chain] = c
			}
		}
		if recs != nil {
			h.tails.add(recs, cacheable)
		} else {
			// Appended by a write of its own (flushAudit): the records
			// are not at hand, and a tail must hold consecutive ones.
			h.tails.forget(s.chains)
		}
	} else {
		for _, c := range s.chains {
			delete(h.heads, c)
		}
		h.tails.forget(s.chains)
	}
	h.mu.Unlock()
	for _, i := range slices.Backward(s.idx) {
		h.stripes[i].Unlock()
	}
}

// dropAll empties the cache and starts a new generation, so that heads
// read before it do not join it.
func (h *pgHeads) dropAll() {
	h.mu.Lock()
	h.gen++
	clear(h.heads)
	h.tails.reset()
	h.mu.Unlock()
}

// len is how many heads the cache holds (tests).
func (h *pgHeads) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.heads)
}
