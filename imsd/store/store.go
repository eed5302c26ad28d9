// Package store persists imsd's fleet state (operator tokens, apps, installs,
// agents, jobs and their logs) in SQL through sqlx. One implementation serves
// SQLite (the default: one file, zero setup) and PostgreSQL (several imsd
// replicas on one database); the few places where the SQL differs switch on
// the dialect.
//
// The store never reads the clock: every method that records a time takes it
// as an argument, so callers and tests decide what "now" is. IDs are made by
// the caller too. Errors a client may see are *errs.Error values; anything
// else is internal.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/schema/migrations"
)

// The dialects Dialect reports.
const (
	DialectSQLite   = migrations.SQLite
	DialectPostgres = migrations.Postgres
)

// Store is imsd's persistent state. It is safe for concurrent use.
type Store struct {
	dialect string
	// w runs every write transaction. On SQLite it holds a single
	// connection, which serialises writers inside the process (and makes
	// every transaction take the write lock up front, BEGIN IMMEDIATE), so
	// there are no busy-upgrade failures between our own transactions.
	w *sqlx.DB
	// r serves plain reads. On SQLite it is a separate pool of read-only
	// connections so reads never queue behind the writer (WAL lets them run
	// alongside it), with its queries kept prepared. On PostgreSQL it
	// wraps the same pool as w.
	r *reader
	// gc is the group-commit writer on SQLite; nil on PostgreSQL.
	gc *groupCommit
	// pgc is the group commit of the job hot path's writes on PostgreSQL
	// (pgwriter.go), where every other write has a transaction of its
	// own; nil on SQLite.
	pgc *pgGroupCommit
	// pgh caches the install audit chains' heads on PostgreSQL
	// (pgheads.go); nil on SQLite.
	pgh *pgHeads
	// pg is the parsed PostgreSQL config, used by Listen for its dedicated
	// connection. Nil on SQLite.
	pg *pgx.ConnConfig
	// self names this store's process in the notes it sends other
	// replicas (cancels.go), so that it skips its own.
	self string
	// ready is Ready's own pool of one connection on PostgreSQL, so a
	// balancer's health check never queues behind the hot path's pool (a
	// hello storm holds all of it; a check that times out there takes the
	// replica out of the balancer, and the storm never ends). Nil on
	// SQLite, whose readers serve it.
	ready *sql.DB
	// installIDs caches what InstallID resolved: installs are never
	// renamed or deleted, so a name or id, once found, names the same
	// install for good.
	installIDs idCache
	// agentInstalls caches each agent's install, by agent id: an agent
	// is bound to one install at enrolment and never moved or deleted.
	agentInstalls idCache
	// logLimits caps each job's stored log (SetLogLimits; logcap.go);
	// logDropped counts the lines this store dropped past it.
	logLimits  LogLimits
	logDropped atomic.Int64
}

// Open opens the database named by dsn and applies pending migrations.
// A dsn starting with postgres:// or postgresql:// is a PostgreSQL URL;
// anything else is a SQLite file path, optionally prefixed with "sqlite:".
func Open(ctx context.Context, dsn string) (*Store, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return openPostgres(ctx, dsn)
	}
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "sqlite:")
	return openSQLite(ctx, path)
}

const (
	sqliteReaders = 4
	postgresConns = 20
)

func openSQLite(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.Contains(path, ":memory:") || strings.Contains(path, "?") {
		// Two pools need a shared file; and the query string is ours.
		return nil, errs.Field("dsn", "want a SQLite file path without parameters, got %q", path)
	}
	// _pragma parameters run on every new connection of a pool, so pooled
	// connections cannot miss them.
	common := "?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	// temp_store(MEMORY) keeps the writer's statement and savepoint
	// journals in memory: a group commit's savepoints, and an INSERT ...
	// SELECT's statement journal, otherwise spill to a temporary file past
	// 64 KiB, a write syscall per page (7 % of imsd's CPU under load;
	// docs/performance-store.md).
	// wal_autocheckpoint(10000) checkpoints every 10,000 WAL pages (40
	// MB) instead of 1,000: a page written again and again between
	// checkpoints (the jobs and audit indexes) is copied to the database
	// once per checkpoint, which took 12 % of imsd's CPU under load at
	// 1,000 and 4 % at 10,000 (docs/performance-store.md).
	wdb, err := sql.Open("sqlite", path+common+"&_pragma=journal_mode(WAL)&_pragma=temp_store(MEMORY)&_pragma=wal_autocheckpoint(10000)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	s := &Store{dialect: DialectSQLite, w: sqlx.NewDb(wdb, "sqlite")}
	// Migrate through the writer first: it creates the file and switches it
	// to WAL before any reader opens it.
	if err := migrations.Apply(ctx, wdb, migrations.SQLite); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", path+common+"&_pragma=query_only(1)")
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(sqliteReaders)
	rdb.SetMaxIdleConns(sqliteReaders)
	if err := rdb.PingContext(ctx); err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	s.r = newReader(sqlx.NewDb(rdb, "sqlite"), true)
	s.gc = startGroupCommit(s.w)
	return s, nil
}

func openPostgres(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the password.
		return nil, errs.Field("dsn", "not a valid PostgreSQL URL")
	}
	// Every new connection empties the audit heads' cache: a failover
	// or a restore of the database comes with new connections, and the
	// heads of the database now serving may be behind the cache's.
	heads := newPGHeads()
	db := stdlib.OpenDB(*cfg, stdlib.OptionAfterConnect(func(context.Context, *pgx.Conn) error {
		heads.dropAll()
		return nil
	}))
	db.SetMaxOpenConns(postgresConns)
	db.SetMaxIdleConns(postgresConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres %s@%s/%s: %w", cfg.User, cfg.Host, cfg.Database, err)
	}
	if err := migrations.Apply(ctx, db, migrations.Postgres); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	ready := stdlib.OpenDB(*cfg)
	ready.SetMaxOpenConns(1)
	ready.SetMaxIdleConns(1)
	x := sqlx.NewDb(db, "pgx")
	s := &Store{dialect: DialectPostgres, w: x, r: newReader(x, false), pg: cfg, ready: ready, pgh: heads, self: rand.Text()}
	s.pgc = startPGGroupCommit(s)
	return s, nil
}

// Close closes the database pools. Writes already queued are run first;
// writes that arrive after Close fail.
func (s *Store) Close() error {
	if s.gc != nil {
		s.gc.stop()
	}
	if s.pgc != nil {
		s.pgc.stop()
	}
	err := s.r.Close(s.r.db != s.w)
	if s.ready != nil {
		err = errors.Join(err, s.ready.Close())
	}
	return errors.Join(err, s.w.Close())
}

// Ready reports whether the database answers, for imsd's /readyz: on
// PostgreSQL a query on a connection of its own (never one the job path
// holds), on SQLite a read of the schema through the readers.
func (s *Store) Ready(ctx context.Context) error {
	if s.ready != nil {
		var one int
		if err := s.ready.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
			return fmt.Errorf("database not reachable: %w", err)
		}
		return nil
	}
	if _, err := s.CountAPITokens(ctx); err != nil {
		return fmt.Errorf("database not reachable: %w", err)
	}
	return nil
}

// Dialect reports which database the store uses: "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.dialect }

func (s *Store) postgres() bool { return s.dialect == DialectPostgres }

// bind rewrites ? placeholders for the dialect.
func (s *Store) bind(q string) string { return s.w.Rebind(q) }

// forUpdate locks the rows a write transaction reads before changing them.
// SQLite has no row locks; its single writer connection already excludes
// every other writer.
func (s *Store) forUpdate() string {
	if s.postgres() {
		return " FOR UPDATE"
	}
	return ""
}

// phaseIs is a condition on PostgreSQL's jobs.phase (migration 36: the
// state with assigned and running as one phase, "held"), followed by
// AND, for a query on jobs in states: PostgreSQL's indexes on live and
// unsucceeded jobs name phase, not state, so that an ack or a lease
// renewal updates its row in place, and a query names the phase for the
// planner to use them. The phases are written into the SQL, not bound:
// a partial index serves a query only when the planner sees that the
// query's condition implies the index's. On SQLite it is empty (its
// indexes name state). states are the store's own constants.
func (s *Store) phaseIs(states ...JobState) string {
	if !s.postgres() {
		return ""
	}
	var phases []string
	for _, st := range states {
		p := "'" + string(st) + "'"
		if st == JobAssigned || st == JobRunning {
			p = "'held'"
		}
		if !slices.Contains(phases, p) {
			phases = append(phases, p)
		}
	}
	return "phase IN (" + strings.Join(phases, ", ") + ") AND "
}

// skipLocked is forUpdate for queue scans: rows another replica holds are
// passed over rather than waited for.
func (s *Store) skipLocked() string {
	if s.postgres() {
		return " FOR UPDATE SKIP LOCKED"
	}
	return ""
}

func wrap(op string, err error) error {
	var e *errs.Error
	if errors.As(err, &e) {
		return e
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isUnique reports whether err is a unique or primary key violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isForeignKey reports whether err is a foreign key violation.
func isForeignKey(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

// nanos converts t to the stored form: Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos. Times come back in UTC.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// decodeMap is the inverse of encodeMap; an empty object is nil.
func decodeMap(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("decode stored JSON: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// newFencingToken returns a random positive int64 from crypto/rand, so a
// token cannot be guessed from the last one.
func newFencingToken() int64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand panics instead)
		if t := int64(binary.BigEndian.Uint64(b[:]) >> 1); t > 0 {
			return t
		}
	}
}

func requireTime(field string, t time.Time) error {
	if t.IsZero() || t.UnixNano() <= 0 {
		return errs.Field(field, "a time after 1970 is required")
	}
	return nil
}

// placeholders returns "?, ?, ..." with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
