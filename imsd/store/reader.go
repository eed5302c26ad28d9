package store

import (
	"context"
	"sync"

	"github.com/jmoiron/sqlx"
)

// reader runs the plain reads of a store. On SQLite it keeps each query
// prepared on the read pool: modernc.org/sqlite compiles unprepared SQL at
// every call, and compiling a query cost more than running it (the
// install lookup of every enqueue was an eighth of imsd's CPU under load).
// On PostgreSQL it passes queries through, since pgx caches its prepared
// statements per connection already.
type reader struct {
	db *sqlx.DB
	// prepare is false on PostgreSQL.
	prepare bool

	mu    sync.RWMutex
	stmts map[string]*sqlx.Stmt // by SQL text; at most maxStmts
}

func newReader(db *sqlx.DB, prepare bool) *reader {
	return &reader{db: db, prepare: prepare, stmts: map[string]*sqlx.Stmt{}}
}

// stmt returns q prepared, or nil to run it as it is (on PostgreSQL, past
// the cap, or when preparing fails: the query then reports the error).
func (r *reader) stmt(ctx context.Context, q string) *sqlx.Stmt {
	if !r.prepare {
		return nil
	}
	// Every read passes here: the usual case, a prepared query, only
	// shares the lock.
	r.mu.RLock()
	st, ok := r.stmts[q]
	r.mu.RUnlock()
	if ok {
		return st
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.stmts[q]; ok {
		return st
	}
	if r.stmts == nil || len(r.stmts) >= maxStmts {
		return nil
	}
	// Preparing holds the lock: concurrent first uses of one query wait
	// rather than prepare it twice. It happens once per query text.
	st, err := r.db.PreparexContext(ctx, q)
	if err != nil {
		return nil
	}
	r.stmts[q] = st
	return st
}

// GetContext is sqlx.DB's GetContext through the statement cache.
func (r *reader) GetContext(ctx context.Context, dest any, q string, args ...any) error {
	if st := r.stmt(ctx, q); st != nil {
		return st.GetContext(ctx, dest, args...)
	}
	return r.db.GetContext(ctx, dest, q, args...)
}

// SelectContext is sqlx.DB's SelectContext through the statement cache.
func (r *reader) SelectContext(ctx context.Context, dest any, q string, args ...any) error {
	if st := r.stmt(ctx, q); st != nil {
		return st.SelectContext(ctx, dest, args...)
	}
	return r.db.SelectContext(ctx, dest, q, args...)
}

// QueryContext is sqlx.DB's QueryxContext through the statement cache, for
// a caller that scans the rows itself (no reflection).
func (r *reader) QueryContext(ctx context.Context, q string, args ...any) (*sqlx.Rows, error) {
	if st := r.stmt(ctx, q); st != nil {
		return st.QueryxContext(ctx, args...)
	}
	return r.db.QueryxContext(ctx, q, args...)
}

// Close closes the cached statements and, unless it is shared with the
// writer, the pool.
func (r *reader) Close(closeDB bool) error {
	r.mu.Lock()
	for _, st := range r.stmts {
		st.Close()
	}
	r.stmts = nil
	r.mu.Unlock()
	if closeDB {
		return r.db.Close()
	}
	return nil
}
