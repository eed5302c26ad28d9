package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// txn is the transaction a write function runs in. Its methods take a
// context like sqlx.Tx's, but on SQLite they run under the context of the
// whole group-commit batch instead: a caller giving up must not interrupt a
// statement, since SQLite rolls back the entire transaction, other callers'
// writes included, when it interrupts an UPDATE or INSERT.
type txn struct {
	tx *sqlx.Tx
	// ctx replaces the caller's context for every statement, when set.
	ctx context.Context
	// g, when set, keeps statements prepared across transactions.
	g *groupCommit
	// audit holds the events the running write function queued (Audit),
	// appended when it returns nil (withAudit).
	audit []pendingAudit
	// heads are the audit chain heads this batch's successful writes
	// appended, moved to g.heads once the batch commits (nil when g is).
	heads map[string]chainHead
	// records are the audit records of this batch's successful writes,
	// chained, inserted just before the batch commits (SQLite only).
	records []auditchain.Record
	// pgb, on PostgreSQL's group commit, collects the audit records and
	// wake-ups of the batch's writes for its end (pgwriter.go).
	pgb *pgBatch
	// pgHeld and pgNew, on PostgreSQL in a write of its own, are the
	// audit heads' cache stripes the write holds and the heads it
	// appended, for writeTx once the transaction ended (pgheads.go).
	pgHeld *heldStripes
	pgNew  []chainHead
}

// stmt returns q prepared within the transaction, or nil to run it as is.
func (t *txn) stmt(ctx context.Context, q string) *sqlx.Stmt {
	if t.g == nil {
		return nil
	}
	st := t.g.prepared(q)
	if st == nil {
		return nil
	}
	return t.tx.StmtxContext(ctx, st)
}

func (t *txn) c(ctx context.Context) context.Context {
	if t.ctx != nil {
		return t.ctx
	}
	return ctx
}

func (t *txn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	ctx = t.c(ctx)
	if st := t.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, q, args...)
}

func (t *txn) GetContext(ctx context.Context, dest any, q string, args ...any) error {
	ctx = t.c(ctx)
	if st := t.stmt(ctx, q); st != nil {
		return st.GetContext(ctx, dest, args...)
	}
	return t.tx.GetContext(ctx, dest, q, args...)
}

// QueryRowContext runs a query expected to return at most one row, for a
// caller that scans the columns itself: cheaper than GetContext's
// reflection, which showed in profiles of the hot job statements.
func (t *txn) QueryRowContext(ctx context.Context, q string, args ...any) *sqlx.Row {
	ctx = t.c(ctx)
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryRowxContext(ctx, args...)
	}
	return t.tx.QueryRowxContext(ctx, q, args...)
}

// QueryContext runs a query for a caller that scans the rows itself.
func (t *txn) QueryContext(ctx context.Context, q string, args ...any) (*sqlx.Rows, error) {
	ctx = t.c(ctx)
	if st := t.stmt(ctx, q); st != nil {
		return st.QueryxContext(ctx, args...)
	}
	return t.tx.QueryxContext(ctx, q, args...)
}

func (t *txn) SelectContext(ctx context.Context, dest any, q string, args ...any) error {
	ctx = t.c(ctx)
	if st := t.stmt(ctx, q); st != nil {
		return st.SelectContext(ctx, dest, args...)
	}
	return t.tx.SelectContext(ctx, dest, q, args...)
}

// write runs fn in a transaction and commits it when fn returns nil. op
// names the operation in internal errors; *errs.Error values pass through
// unwrapped. On SQLite fn joins the group commit.
func (s *Store) write(ctx context.Context, op string, fn func(tx *txn) error) error {
	return s.writeTx(ctx, op, false, fn)
}

// writeOne is write for an fn that changes the database in at most one
// statement, its last, and that fails with an *errs.Error only when it
// has changed nothing (a refusal, or a statement that failed, which
// SQLite undoes by itself). In a group commit such a write needs no
// savepoint of its own: two statements fewer per write. Any other error
// from fn rolls back the whole batch, since it may leave a change behind.
// (docs/performance-store.md, "SQLite writer".)
func (s *Store) writeOne(ctx context.Context, op string, fn func(tx *txn) error) error {
	return s.writeTx(ctx, op, true, fn)
}

func (s *Store) writeTx(ctx context.Context, op string, one bool, fn func(tx *txn) error) error {
	fn = s.withAudit(fn)
	if s.gc != nil {
		return s.gc.write(ctx, op, one, fn)
	}
	if s.pgc != nil && one {
		return s.pgc.write(ctx, op, one, fn)
	}
	tx, err := s.w.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	t := &txn{tx: tx}
	ended := false
	defer func() {
		// fn failed or panicked: the stripes go after the rollback.
		if !ended {
			tx.Rollback() //nolint:errcheck
			t.pgHeld.release(false, nil, nil)
		}
	}()
	if err := fn(t); err != nil {
		return wrap(op, err)
	}
	err = tx.Commit()
	ended = true
	t.pgHeld.release(err == nil, t.pgNew, nil)
	if err != nil {
		return fmt.Errorf("%s: commit: %w", op, err)
	}
	return nil
}

// maxBatch caps how many writes share one SQLite transaction.
const maxBatch = 128

// errClosed is what a write gets once the store is closing.
var errClosed = errors.New("store closed")

// groupCommit runs SQLite writes on one goroutine: every write waiting when
// it is free runs in one transaction, each in a savepoint of its own, so a
// failed write is undone alone, and one COMMIT answers them all. SQLite
// allows one writer anyway; what a batch saves is a BEGIN and a COMMIT (a
// WAL append and lock round trip) per write.
type groupCommit struct {
	db *sqlx.DB
	// stmts holds statements prepared on the one writer connection, by
	// SQL text: modernc.org/sqlite compiles a statement anew for every
	// query unless it is prepared, and compiling cost more than running.
	// Only the writer goroutine uses it; nil once stopped.
	stmts     map[string]*sqlx.Stmt
	toPrepare []string
	// heads caches each audit chain's last committed record (seq, hash),
	// so appending an event needs no read of the chain. Only the writer
	// goroutine uses it; a batch's heads join it at its commit.
	heads map[string]chainHead
	// tails are the newest committed records of each chain, for readers
	// (audittail.go); it has its own lock.
	tails *auditTails
	// dataVersion is SQLite's data_version as the writer last read it:
	// it changes when another connection (another process or Store on
	// the file) commits, and then heads may be stale (checkHeads).
	dataVersion int64
	reqs        chan *writeReq
	quit        chan struct{}
	done        chan struct{}
	once        sync.Once
}

type writeReq struct {
	ctx context.Context
	op  string
	fn  func(tx *txn) error
	// one marks a writeOne write: it runs without a savepoint.
	one bool
	// pre, on PostgreSQL, is the usual case of an ack or a finish, run
	// for the whole batch in one statement (pgfast.go).
	pre *pgPre
	// err is sent exactly once; buffered so the writer never waits.
	err chan error
	// pending is the answer kept until the batch commits.
	ok bool
}

func startGroupCommit(db *sqlx.DB) *groupCommit {
	g := &groupCommit{db: db, stmts: map[string]*sqlx.Stmt{}, heads: map[string]chainHead{}, tails: newAuditTails(), reqs: make(chan *writeReq), quit: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

func (g *groupCommit) write(ctx context.Context, op string, one bool, fn func(tx *txn) error) error {
	r := &writeReq{ctx: ctx, op: op, fn: fn, one: one, err: make(chan error, 1)}
	select {
	case g.reqs <- r:
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	case <-g.quit:
		return fmt.Errorf("%s: %w", op, errClosed)
	}
	// Once taken, a write is always answered, and soon: its caller waits
	// to learn whether it committed even if ctx ends meanwhile.
	return <-r.err
}

// stop runs the writes already queued, then stops the writer.
func (g *groupCommit) stop() {
	g.once.Do(func() { close(g.quit) })
	<-g.done
}

// maxStmts caps the prepared statements kept. Statements built for a
// batch size (log chunks, lease renewals) vary; past the cap, new ones run
// unprepared.
const maxStmts = 256

// prepared returns q's prepared statement, or nil if it has none yet; it
// is then prepared after the batch, when the connection is free again.
func (g *groupCommit) prepared(q string) *sqlx.Stmt {
	if st, ok := g.stmts[q]; ok {
		return st
	}
	if len(g.stmts)+len(g.toPrepare) < maxStmts && !slices.Contains(g.toPrepare, q) {
		g.toPrepare = append(g.toPrepare, q)
	}
	return nil
}

// prepare prepares the statements the last batch ran unprepared.
func (g *groupCommit) prepare() {
	for _, q := range g.toPrepare {
		if st, err := g.db.Preparex(q); err == nil {
			g.stmts[q] = st
		} // else the unprepared query reports the error each time
	}
	g.toPrepare = g.toPrepare[:0]
}

func (g *groupCommit) run() {
	defer func() {
		for _, st := range g.stmts {
			st.Close()
		}
		g.stmts = nil
		close(g.done)
	}()
	batch := make([]*writeReq, 0, maxBatch)
	for {
		select {
		case r := <-g.reqs:
			batch = append(batch[:0], r)
		case <-g.quit:
			// Drain: run whoever is still waiting, then stop.
			for {
				batch = g.gather(batch[:0])
				if len(batch) == 0 {
					return
				}
				g.runBatch(batch)
			}
		}
		g.runBatch(g.gather(batch))
		g.prepare()
	}
}

// gather adds to batch every write waiting now, up to maxBatch.
func (g *groupCommit) gather(batch []*writeReq) []*writeReq {
	for len(batch) < maxBatch {
		select {
		case r := <-g.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

func (g *groupCommit) runBatch(batch []*writeReq) {
	ctx := context.Background()
	tx, err := g.db.BeginTxx(ctx, nil)
	if err != nil {
		for _, r := range batch {
			r.err <- fmt.Errorf("%s: %w", r.op, err)
		}
		return
	}
	t := &txn{tx: tx, ctx: ctx, g: g, heads: map[string]chainHead{}}
	g.checkHeads(t)
	if len(batch) == 1 {
		// Nothing to isolate from: no savepoint.
		r := batch[0]
		if err := r.ctx.Err(); err != nil {
			tx.Rollback() //nolint:errcheck
			r.err <- fmt.Errorf("%s: %w", r.op, err)
			return
		}
		if err := r.fn(t); err != nil {
			tx.Rollback() //nolint:errcheck
			r.err <- wrap(r.op, err)
			return
		}
		if err := g.insertAudit(t); err != nil {
			tx.Rollback() //nolint:errcheck
			r.err <- fmt.Errorf("%s: %w", r.op, err)
			return
		}
		if err := tx.Commit(); err != nil {
			r.err <- fmt.Errorf("%s: commit: %w", r.op, err)
			return
		}
		maps.Copy(g.heads, t.heads)
		g.tails.add(t.records, nil)
		r.err <- nil
		return
	}
	for i, r := range batch {
		r.ok = false
		if err := r.ctx.Err(); err != nil {
			// Its caller gave up while it waited: skip it.
			r.err <- fmt.Errorf("%s: %w", r.op, err)
			continue
		}
		if r.one {
			ferr := r.fn(t)
			if ferr == nil {
				r.ok = true
				continue
			}
			r.err <- wrap(r.op, ferr)
			var e *errs.Error
			if !errors.As(ferr, &e) {
				// It may have left a change behind: undo the batch.
				g.fail(tx, batch, i, true, ferr)
				return
			}
			continue
		}
		if _, err := t.ExecContext(ctx, "SAVEPOINT w"); err != nil {
			g.fail(tx, batch, i, false, err)
			return
		}
		ferr := r.fn(t)
		if ferr != nil {
			r.err <- wrap(r.op, ferr)
			if _, err := t.ExecContext(ctx, "ROLLBACK TO w"); err != nil {
				// SQLite already rolled back the whole transaction (a
				// full disk, say): the earlier writes are lost too.
				g.fail(tx, batch, i, true, err)
				return
			}
		}
		if _, err := t.ExecContext(ctx, "RELEASE w"); err != nil {
			g.fail(tx, batch, i, ferr != nil, err)
			return
		}
		r.ok = ferr == nil
	}
	if err := g.insertAudit(t); err != nil {
		// Every write of the batch that succeeded recorded an event or
		// shares the transaction of one that did: none may commit.
		g.fail(tx, batch, len(batch), true, err)
		return
	}
	err = tx.Commit()
	if err == nil {
		maps.Copy(g.heads, t.heads)
		g.tails.add(t.records, nil)
	}
	for _, r := range batch {
		if !r.ok {
			continue // already answered
		}
		if err != nil {
			r.err <- fmt.Errorf("%s: commit: %w", r.op, err)
		} else {
			r.err <- nil
		}
	}
}

// fail rolls the batch back after a failure at batch[i] and fails every
// write not yet answered: those before i that waited for the commit, i
// itself unless answered, and those after i, which never ran.
func (g *groupCommit) fail(tx *sqlx.Tx, batch []*writeReq, i int, answered bool, err error) {
	tx.Rollback() //nolint:errcheck
	for j, r := range batch {
		if (j < i && r.ok) || (j == i && !answered) || j > i {
			r.err <- fmt.Errorf("%s: %w", r.op, err)
		}
	}
}

// auditRowsPerInsert are the row counts of the multi-row INSERTs of a
// batch's audit records, largest first: a few fixed statements, each
// prepared once (9 parameters a row, well under SQLite's limit).
var auditRowsPerInsert = []int{64, 16, 4, 1}

// insertAudit inserts the audit records t's writes chained (chainAudit),
// in as few statements as auditRowsPerInsert allows. A unique-key
// conflict means the cached head of a chain is stale (another process
// appended to the database file): the cache is dropped, so that the
// writes, tried again, read the heads.
func (g *groupCommit) insertAudit(t *txn) error {
	rs := t.records // kept in t for tails once the batch commits
	for len(rs) > 0 {
		n := 1
		for _, k := range auditRowsPerInsert {
			if len(rs) >= k {
				n = k
				break
			}
		}
		args := make([]any, 0, 9*n)
		for _, r := range rs[:n] {
			args = append(args, r.Chain, r.Seq, r.At, r.Kind, r.Actor, r.Subject, r.Data, r.Prev, r.Hash)
		}
		if _, err := t.ExecContext(t.ctx, auditInsertSQL[n], args...); err != nil {
			if isUnique(err) {
				clear(g.heads)
				return fmt.Errorf("audit: append to chain %q: a record with seq %d exists already (written by another process); try again: %w", rs[0].Chain, rs[0].Seq, err)
			}
			return fmt.Errorf("audit: append %d records: %w", n, err)
		}
		rs = rs[n:]
	}
	return nil
}

// auditInsertSQL is the INSERT of n audit rows, for each n of
// auditRowsPerInsert.
var auditInsertSQL = func() map[int]string {
	m := map[int]string{}
	for _, n := range auditRowsPerInsert {
		m[n] = "INSERT INTO audit_events (chain, seq, at, kind, actor, subject, data, prev, hash) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?), ", n), ", ")
	}
	return m
}()

// checkHeads drops the cached audit chain heads when another connection
// committed to the database file since the writer last looked: it may
// have appended to a chain. A batch's transaction holds the write lock
// (BEGIN IMMEDIATE), so nothing else commits until it ends.
func (g *groupCommit) checkHeads(t *txn) {
	var v int64
	if err := t.QueryRowContext(t.ctx, "PRAGMA data_version").Scan(&v); err != nil || v != g.dataVersion {
		clear(g.heads)
		g.tails.reset()
		g.dataVersion = v
	}
}
