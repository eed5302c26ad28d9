package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// The statements migration 10 runs on SQLite before it rewrites the
// jobs table's state check (postgres/00010_permission_modes.sql is the
// same change for PostgreSQL). A job's mode is the permission mode it
// needs; an agent's permissions are the customer's permission state as
// the agent last reported it (JSON, "" for never), with the time of the
// report. Rows from before keep mode 'maintenance', what an ad-hoc job
// needs.
var sqliteModesUp = []string{
	`ALTER TABLE jobs ADD COLUMN mode TEXT NOT NULL DEFAULT 'maintenance'
		CHECK (mode = 'provision' OR mode = 'maintenance' OR mode = 'deprovision' OR mode = 'break_glass')`,
	`ALTER TABLE agents ADD COLUMN permissions TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE agents ADD COLUMN permissions_at INTEGER NOT NULL DEFAULT 0`,
}

var sqliteModesDown = []string{
	`ALTER TABLE agents DROP COLUMN permissions_at`,
	`ALTER TABLE agents DROP COLUMN permissions`,
	`ALTER TABLE jobs DROP COLUMN mode`,
}

// stateCheckLast is the last term of the jobs table's state check as
// migration 7 left it; refusedTerm is added after it.
const (
	stateCheckLast = `state = 'timed_out')`
	refusedTerm    = ` OR state = 'refused'`
)

// sqlitePermissionModes is SQLite migration 10: the columns above, and
// the job state 'refused' (a job the agent refused because the mode it
// needs is off) added to the jobs table's state check. SQLite cannot
// alter a CHECK, so, as migration 7 does, this edits the stored CREATE
// statement: the new check accepts every row the old one did, and more.
// It is Go, not SQL, because the schema version must be bumped by a
// number read first.
func sqlitePermissionModes(ctx context.Context, tx *sql.Tx) error {
	for _, q := range sqliteModesUp {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	var create string
	if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'jobs'`).Scan(&create); err != nil {
		return fmt.Errorf("read the jobs table: %w", err)
	}
	if n := strings.Count(create, stateCheckLast); n != 1 {
		return fmt.Errorf("add state 'refused' to the jobs table's check: found %q %d times, want once; the database is left as it was", stateCheckLast, n)
	}
	create = strings.Replace(create, stateCheckLast, strings.TrimSuffix(stateCheckLast, ")")+refusedTerm+")", 1)
	return rewriteTables(ctx, tx, []table{{"jobs", create}})
}

// sqlitePermissionModesDown undoes migration 10. It fails while a job is
// refused, since the old check would not accept it.
func sqlitePermissionModesDown(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM jobs WHERE state = 'refused'`).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d jobs are refused, a state the older schema does not know", n)
	}
	var create string
	if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'jobs'`).Scan(&create); err != nil {
		return err
	}
	if err := rewriteTables(ctx, tx, []table{{"jobs", strings.Replace(create, refusedTerm, "", 1)}}); err != nil {
		return err
	}
	for _, q := range sqliteModesDown {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}
