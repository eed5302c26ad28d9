package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// pgGroupCommit is the PostgreSQL group commit: the writes of the job hot
// path (every writeOne, and EnqueueJobs) that are waiting when a lane is
// free run in one transaction, and their audit records and wake-ups go in
// a few statements at its end. Before it, each such write was a
// transaction of its own, and its audit flush four statements more: about
// 17 round trips and 3 transactions per dispatched job
// (docs/performance-postgres.md).
//
// Writes that PostgreSQL refuses midway abort the whole transaction (it
// has no statement-level rollback without a savepoint, which costs two
// round trips per write): then the batch is rolled back, the failed
// write answered, and the others run again in a new transaction. So a
// batched write function must be safe to run again after a rollback: it
// may assign what it found to its caller's variables, never append to
// them. writeOne's and EnqueueJobs's functions are.
//
// A transaction-scoped advisory lock per audit chain, taken at the end in
// chain order after every row lock, orders the appends with other writes
// and other replicas (as flushAudit does for a write of its own); a
// deadlock or serialization failure runs the batch again.
type pgGroupCommit struct {
	s    *Store
	db   *sqlx.DB
	reqs chan *writeReq
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// pgLanes is how many batches one imsd runs on PostgreSQL at once: while
// one waits for a round trip, the next gathers and runs.
const pgLanes = 2

// pgMaxBatch caps the writes of one PostgreSQL batch.
const pgMaxBatch = 256

// pgRetries is how often a batch runs again after a deadlock or a
// serialization failure before its writes get the error.
const pgRetries = 5

func startPGGroupCommit(s *Store) *pgGroupCommit {
	g := &pgGroupCommit{s: s, db: s.w, reqs: make(chan *writeReq), quit: make(chan struct{})}
	for range pgLanes {
		g.wg.Add(1)
		go g.run()
	}
	return g
}

func (g *pgGroupCommit) write(ctx context.Context, op string, one bool, fn func(tx *txn) error) error {
	return g.send(&writeReq{ctx: ctx, op: op, fn: fn, one: one, err: make(chan error, 1)})
}

func (g *pgGroupCommit) send(r *writeReq) error {
	select {
	case g.reqs <- r:
	case <-r.ctx.Done():
		return fmt.Errorf("%s: %w", r.op, r.ctx.Err())
	case <-g.quit:
		return fmt.Errorf("%s: %w", r.op, errClosed)
	}
	return <-r.err
}

// stop runs the writes already taken, then stops the lanes.
func (g *pgGroupCommit) stop() {
	g.once.Do(func() { close(g.quit) })
	g.wg.Wait()
}

func (g *pgGroupCommit) run() {
	defer g.wg.Done()
	batch := make([]*writeReq, 0, pgMaxBatch)
	for {
		select {
		case r := <-g.reqs:
			batch = append(batch[:0], r)
		case <-g.quit:
			for {
				batch = g.gather(batch[:0])
				if len(batch) == 0 {
					return
				}
				g.runBatch(batch)
			}
		}
		g.runBatch(g.gather(batch))
	}
}

func (g *pgGroupCommit) gather(batch []*writeReq) []*writeReq {
	for len(batch) < pgMaxBatch {
		select {
		case r := <-g.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// runBatch runs batch until every write is answered.
func (g *pgGroupCommit) runBatch(batch []*writeReq) {
	retries := 0
	for len(batch) > 0 {
		again, retry := g.try(batch, retries < pgRetries)
		if retry {
			retries++
		}
		batch = again
	}
}

// pgBatch is what the writes of one PostgreSQL batch queued for its end.
type pgBatch struct {
	audit []auditchain.Record // unchained: seq, prev and hash are set at the end
	notes [][2]string         // channel, payload
}

// try runs batch in one transaction and answers the writes it can. It
// returns the writes to run again, in a new transaction, and whether
// that is for a deadlock or serialization failure (retry) rather than a
// write that failed and was answered.
func (g *pgGroupCommit) try(batch []*writeReq, mayRetry bool) (again []*writeReq, retry bool) {
	ctx := context.Background()
	tx, err := g.db.BeginTxx(ctx, nil)
	if err != nil {
		for _, r := range batch {
			r.err <- fmt.Errorf("%s: %w", r.op, err)
		}
		return nil, false
	}
	b := &pgBatch{}
	t := &txn{tx: tx, ctx: ctx, pgb: b}
	if !mayRetry {
		for _, r := range batch {
			if r.pre != nil {
				r.pre.disabled = true
			}
		}
	}
	if err := g.pres(t, batch); err != nil {
		// Run them again without the shared statements: each write's own
		// function then meets (and reports) what failed.
		tx.Rollback() //nolint:errcheck
		for _, r := range batch {
			if r.pre != nil && !retryable(err) {
				r.pre.disabled = true
			}
		}
		return batch, true
	}
	// A refusal is answered only once the transaction has ended: the
	// refused write may hold row locks (its SELECT ... FOR UPDATE), and a
	// caller that went on at once would find its next claim skipping the
	// still-locked row (storetest LeaseExpiryRequeues, 1 run in 10).
	type answer struct {
		r   *writeReq
		err error
	}
	var refused []answer
	defer func() {
		for _, a := range refused {
			a.r.err <- a.err
		}
	}()
	done := make([]*writeReq, 0, len(batch))
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err <- fmt.Errorf("%s: %w", r.op, err)
			continue
		}
		na, nn := len(b.audit), len(b.notes)
		fn := r.fn
		if r.pre != nil && r.pre.ok {
			fn = r.pre.after
		}
		ferr := fn(t)
		if ferr == nil {
			done = append(done, r)
			continue
		}
		b.audit, b.notes = b.audit[:na], b.notes[:nn]
		if mayRetry && retryable(ferr) {
			tx.Rollback() //nolint:errcheck
			return append(done, batch[i:]...), true
		}
		var e *errs.Error
		if r.one && errors.As(ferr, &e) && (r.pre == nil || !r.pre.ok) && g.alive(ctx, tx) {
			// A refusal that changed nothing: the others go on.
			refused = append(refused, answer{r, wrap(r.op, ferr)})
			continue
		}
		// PostgreSQL aborted the transaction, or the write may have left
		// a change behind: undo the batch and run the others again.
		tx.Rollback() //nolint:errcheck
		r.err <- wrap(r.op, ferr)
		return append(done, batch[i+1:]...), false
	}
	if len(done) == 0 {
		tx.Rollback() //nolint:errcheck
		return nil, false
	}
	// The last try reads every head under its lock: a head another
	// replica keeps moving cannot fail it.
	held, heads, recs, err := g.flush(t, b, mayRetry)
	if err == nil {
		err = tx.Commit()
	} else {
		tx.Rollback() //nolint:errcheck
	}
	held.release(err == nil, heads, recs)
	if err != nil && staleHead(err) {
		g.s.pgh.stale.Add(1)
	}
	if err != nil && mayRetry && (retryable(err) || staleHead(err)) {
		return done, true
	}
	for _, r := range done {
		if err != nil {
			r.err <- fmt.Errorf("%s: commit: %w", r.op, err)
		} else {
			r.err <- nil
		}
	}
	return nil, false
}

// alive reports whether tx can still run statements: PostgreSQL refuses
// every statement after one failed, until the transaction ends.
func (g *pgGroupCommit) alive(ctx context.Context, tx *sqlx.Tx) bool {
	_, err := tx.ExecContext(ctx, `SELECT 1`)
	return err == nil
}

// retryable reports whether err is a deadlock or a serialization failure,
// which PostgreSQL asks the client to answer by running the transaction
// again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// flush appends the batch's audit records to their chains and sends its
// wake-ups: for the records, one statement to lock and read the heads of
// the chains the cache does not hold (pgheads.go) and one to insert
// every record; one for the wake-ups, whatever the batch's size. It
// returns the stripes it holds, for the caller to release once the
// transaction ended, the chains' new heads and the records appended
// (for the tails, in chain and seq order).
func (g *pgGroupCommit) flush(t *txn, b *pgBatch, useCache bool) (*heldStripes, []chainHead, []auditchain.Record, error) {
	ctx := t.ctx
	var held *heldStripes
	var next []chainHead
	var recs []auditchain.Record
	if len(b.audit) > 0 {
		chains := make([]string, 0, 8)
		for _, r := range b.audit {
			chains = append(chains, r.Chain)
		}
		slices.SortFunc(chains, strings.Compare)
		chains = slices.Compact(chains)
		held = g.s.pgh.lock(chains)
		heads := make(map[string]*auditchain.Record, len(chains))
		// Every chain's lock is taken, in chain order: by the statement
		// that reads the heads the cache does not hold (migration 35) or,
		// when it holds them all, by the insert itself. Whoever holds a
		// chain's lock and reads its head reads the true head; a cached
		// head that another replica moved on fails the insert on the
		// primary key.
		read := chains
		if useCache {
			read = make([]string, 0, 4)
			for _, c := range chains {
				if h, ok := g.s.pgh.get(c); ok {
					heads[c] = &auditchain.Record{Seq: h.seq, Hash: h.hash}
				} else {
					read = append(read, c)
				}
			}
		}
		lock := chains
		if len(read) > 0 {
			if err := g.readHeads(t, chains, read, heads); err != nil {
				return held, nil, nil, err
			}
			lock = nil
		}
		n := len(b.audit)
		recs = make([]auditchain.Record, 0, n)
		cols := struct {
			chain, kind, actor, subject, data, prev, hash []string
			seq, at                                       []int64
		}{make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]int64, n), make([]int64, n)}
		for i, ev := range b.audit {
			r := auditchain.Next(heads[ev.Chain], ev)
			heads[ev.Chain] = &r
			recs = append(recs, r)
			cols.chain[i], cols.seq[i], cols.at[i], cols.kind[i], cols.actor[i] = r.Chain, r.Seq, r.At, r.Kind, r.Actor
			cols.subject[i], cols.data[i], cols.prev[i], cols.hash[i] = r.Subject, r.Data, r.Prev, r.Hash
		}
		// $10 are the chains to lock first (an InitPlan: once, before any
		// row), in their order; empty when the heads' read locked them.
		if _, err := t.tx.ExecContext(ctx, `INSERT INTO audit_events (chain, seq, at, kind, actor, subject, data, prev, hash)
			SELECT * FROM unnest($1::TEXT[], $2::BIGINT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[])
			WHERE (SELECT count(pg_advisory_xact_lock(7355608, hashtext(c))) FROM unnest($10::TEXT[]) AS c) >= 0`,
			pgTexts(cols.chain), pgInt8s(cols.seq), pgInt8s(cols.at), pgTexts(cols.kind), pgTexts(cols.actor), pgTexts(cols.subject),
			pgTexts(cols.data), pgTexts(cols.prev), pgTexts(cols.hash), pgTexts(lock)); err != nil {
			return held, nil, nil, fmt.Errorf("audit: append %d records: %w", n, err)
		}
		next = make([]chainHead, 0, len(chains))
		for _, c := range chains {
			next = append(next, chainHead{chain: c, seq: heads[c].Seq, hash: heads[c].Hash})
		}
	}
	if len(b.notes) > 0 {
		slices.SortFunc(b.notes, func(x, y [2]string) int {
			if c := strings.Compare(x[0], y[0]); c != 0 {
				return c
			}
			return strings.Compare(x[1], y[1])
		})
		b.notes = slices.Compact(b.notes)
		chs, ps := make([]string, len(b.notes)), make([]string, len(b.notes))
		for i, nt := range b.notes {
			chs[i], ps[i] = nt[0], nt[1]
		}
		if _, err := t.tx.ExecContext(ctx, `SELECT pg_notify(c, p) FROM unnest($1::TEXT[], $2::TEXT[]) AS u(c, p)`, pgTexts(chs), pgTexts(ps)); err != nil {
			return held, nil, nil, fmt.Errorf("notify %d: %w", len(chs), err)
		}
	}
	return held, next, recs, nil
}

// readHeads locks chains (sorted) and reads the heads of read, a subset,
// into heads: one round trip (migrations 33 and 35).
func (g *pgGroupCommit) readHeads(t *txn, chains, read []string, heads map[string]*auditchain.Record) error {
	var rows *sqlx.Rows
	var err error
	if len(read) == len(chains) {
		rows, err = t.tx.QueryxContext(t.ctx, `SELECT chain, seq, hash FROM byoc_audit_heads($1::TEXT[])`, pgTexts(chains))
	} else {
		rows, err = t.tx.QueryxContext(t.ctx, `SELECT chain, seq, hash FROM byoc_audit_lock_heads($1::TEXT[], $2::TEXT[])`, pgTexts(chains), pgTexts(read))
	}
	if err != nil {
		return fmt.Errorf("audit: lock %d chains and read %d heads: %w", len(chains), len(read), err)
	}
	defer rows.Close()
	// Declared once, and not as pointers (which database/sql would
	// allocate for each row): a few allocations per job fewer.
	var c string
	var seq sql.NullInt64
	var hash sql.NullString
	for rows.Next() {
		if err := rows.Scan(&c, &seq, &hash); err != nil {
			return fmt.Errorf("audit: read chain heads: %w", err)
		}
		if seq.Valid && hash.Valid {
			heads[c] = &auditchain.Record{Seq: seq.Int64, Hash: hash.String}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: read chain heads: %w", err)
	}
	return nil
}

// staleHead reports whether err is an audit record's insert refused on
// the chain's primary key: another process appended to a chain whose
// head this one had cached (pgheads.go). The batch runs again, reading
// that head.
func staleHead(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == "audit_events"
}

// writeMany is write for a write function that may change several rows
// and is safe to run again after a rollback (see pgGroupCommit): on
// PostgreSQL it joins the group commit, on SQLite it is write.
func (s *Store) writeMany(ctx context.Context, op string, fn func(tx *txn) error) error {
	if s.pgc != nil {
		return s.pgc.write(ctx, op, false, s.withAudit(fn))
	}
	return s.write(ctx, op, fn)
}
