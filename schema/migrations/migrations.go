// Package migrations holds byoc's SQL migrations, one directory per dialect
// (sqlite/, postgres/), embedded in the binary and applied with goose.
//
// Both dialects store timestamps as BIGINT Unix nanoseconds, 0 meaning unset,
// and JSON documents as TEXT, so one store implementation reads both.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// The dialects Apply accepts.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Apply applies every pending migration for dialect ("sqlite" or
// "postgres") to db. On PostgreSQL it holds an advisory session lock while
// it runs, so several imsd replicas starting at once migrate exactly once.
func Apply(ctx context.Context, db *sql.DB, dialect string) error {
	p, err := provider(db, dialect)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", dialect, err)
	}
	return nil
}

// MigrateTo migrates db up or down to version, for tests of one
// migration's step on the data of the version before it (imsd applies
// every migration, with Apply).
func MigrateTo(ctx context.Context, db *sql.DB, dialect string, version int64) error {
	p, err := provider(db, dialect)
	if err != nil {
		return err
	}
	cur, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", dialect, err)
	}
	if cur > version {
		_, err = p.DownTo(ctx, version)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	if err != nil {
		return fmt.Errorf("migrate %s to %d: %w", dialect, version, err)
	}
	return nil
}

// provider is goose's provider of dialect's migrations on db.
func provider(db *sql.DB, dialect string) (*goose.Provider, error) {
	var (
		gd   goose.Dialect
		opts []goose.ProviderOption
	)
	switch dialect {
	case SQLite:
		gd = goose.DialectSQLite3
		opts = append(opts, goose.WithGoMigrations(sqliteGoMigrations()...))
	case Postgres:
		gd = goose.DialectPostgres
		// Version 7 changes nothing on PostgreSQL, whose IN checks cost
		// nothing; it keeps the two dialects' versions in step.
		opts = append(opts, goose.WithGoMigrations(goose.NewGoMigration(7,
			&goose.GoFunc{RunTx: noChange}, &goose.GoFunc{RunTx: noChange})))
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	default:
		return nil, fmt.Errorf("migrate: unknown dialect %q", dialect)
	}
	sub, err := fsSub(dialect)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider(gd, db, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", dialect, err)
	}
	return p, nil
}

// sqliteGoMigrations are SQLite's migrations written in Go.
func sqliteGoMigrations() []*goose.Migration {
	return []*goose.Migration{
		goose.NewGoMigration(7, &goose.GoFunc{RunTx: sqliteChecksAsComparisons}, &goose.GoFunc{RunTx: noChange}),
		goose.NewGoMigration(10, &goose.GoFunc{RunTx: sqlitePermissionModes}, &goose.GoFunc{RunTx: sqlitePermissionModesDown}),
		// Version 32 narrows a PostgreSQL index only
		// (jobs_state_unsucceeded); it keeps the dialects' versions in step.
		goose.NewGoMigration(32, &goose.GoFunc{RunTx: noChange}, &goose.GoFunc{RunTx: noChange}),
		// Version 33 adds a PostgreSQL function only (byoc_audit_heads,
		// the audit chains' locks and heads in one round trip).
		goose.NewGoMigration(33, &goose.GoFunc{RunTx: noChange}, &goose.GoFunc{RunTx: noChange}),
		// Version 35 adds a PostgreSQL function only
		// (byoc_audit_lock_heads, the locks of a batch's chains and the
		// heads its cache does not hold).
		goose.NewGoMigration(35, &goose.GoFunc{RunTx: noChange}, &goose.GoFunc{RunTx: noChange}),
		// Version 36 gives PostgreSQL's jobs a phase column and indexes
		// on it, so that acks and lease renewals update rows in place;
		// SQLite keeps its indexes (an update there rewrites only the
		// entries of indexes whose columns changed).
		goose.NewGoMigration(36, &goose.GoFunc{RunTx: noChange}, &goose.GoFunc{RunTx: noChange}),
	}
}

// fsSub is the migration files of one dialect.
func fsSub(dialect string) (fs.FS, error) { return fs.Sub(files, dialect) }
