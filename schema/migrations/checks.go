package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
)

// inList matches `column IN ('a', 'b', 'c')`: a column checked against a
// list of at least three string or integer constants.
var inList = regexp.MustCompile(`(\w+) IN \(((?:'[^']*'|\d+)(?:, (?:'[^']*'|\d+)){2,})\)`)

// listItem matches one constant of such a list.
var listItem = regexp.MustCompile(`'[^']*'|\d+`)

// checksAsComparisons rewrites every `column IN (three or more constants)`
// in sql as `(column = a OR column = b OR ...)`, leaving NOT IN alone.
// It reports how many it rewrote.
func checksAsComparisons(sql string) (string, int) {
	n := 0
	out := inList.ReplaceAllStringFunc(sql, func(m string) string {
		sub := inList.FindStringSubmatch(m)
		if strings.EqualFold(sub[1], "NOT") {
			return m
		}
		items := listItem.FindAllString(sub[2], -1)
		terms := make([]string, len(items))
		for i, it := range items {
			terms[i] = sub[1] + " = " + it
		}
		n++
		return "(" + strings.Join(terms, " OR ") + ")"
	})
	return out, n
}

// sqliteChecksAsComparisons is SQLite migration 7. A CHECK of the form
// `state IN ('queued', 'assigned', ...)` builds a temporary b-tree of the
// list every time a statement evaluates it: on a busy imsd, a quarter of
// the CPU of each job update. The same test written as equality
// comparisons compiles to a few opcodes. SQLite cannot alter a CHECK, so
// this edits the tables' stored CREATE statements in place, the procedure
// SQLite documents for changes that leave the stored data's format alone
// (https://sqlite.org/lang_altertable.html, "making other kinds of table
// schema changes"): the new checks accept exactly the rows the old ones
// did. A schema that does not parse afterwards fails the migration, which
// rolls back.
func sqliteChecksAsComparisons(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND sql IS NOT NULL`)
	if err != nil {
		return err
	}
	var changed []table
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.name, &t.sql); err != nil {
			rows.Close()
			return err
		}
		if s, n := checksAsComparisons(t.sql); n > 0 {
			changed = append(changed, table{t.name, s})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(changed) == 0 {
		return nil
	}
	return rewriteTables(ctx, tx, changed)
}

// rewriteTables replaces the stored CREATE statement of each table in
// changed (name, new sql) in one go, bumps the schema version so that
// every connection re-reads it, and checks the result.
func rewriteTables(ctx context.Context, tx *sql.Tx, changed []table) error {
	var version int64
	if err := tx.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&version); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA writable_schema = ON`); err != nil {
		return err
	}
	for _, t := range changed {
		res, err := tx.ExecContext(ctx, `UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?`, t.sql, t.name)
		if err != nil {
			return fmt.Errorf("rewrite the checks of table %s: %w", t.name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("rewrite the checks of table %s: %w", t.name, err)
		}
		if n != 1 {
			return fmt.Errorf("rewrite the checks of table %s: %d schema rows changed, want 1; the database is left as it was", t.name, n)
		}
	}
	// A new schema version makes every connection re-read the schema.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA schema_version = %d`, version+1)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA writable_schema = OFF`); err != nil {
		return err
	}
	var check string
	if err := tx.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return fmt.Errorf("schema after rewriting checks: %w", err)
	}
	if check != "ok" {
		return fmt.Errorf("schema after rewriting checks: quick_check says %s", check)
	}
	return nil
}

// table is a table's name and its CREATE statement.
type table struct{ name, sql string }

// noChange is a migration step with nothing to do: the down step of a
// change that needs no undoing, or a dialect's side of a version that only
// the other dialect needs.
func noChange(context.Context, *sql.Tx) error { return nil }
