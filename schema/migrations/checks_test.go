package migrations

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

func TestChecksAsComparisons(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`state TEXT CHECK (state IN ('a', 'b', 'c'))`, `state TEXT CHECK ((state = 'a' OR state = 'b' OR state = 'c'))`},
		{`CHECK (health IN ('', 'healthy', 'unhealthy'))`, `CHECK ((health = '' OR health = 'healthy' OR health = 'unhealthy'))`},
		{`CHECK (n IN (1, 2, 3))`, `CHECK ((n = 1 OR n = 2 OR n = 3))`},
		// Two constants compile to comparisons already; NOT IN is left alone.
		{`CHECK (flag IN (0, 1))`, `CHECK (flag IN (0, 1))`},
		{`CHECK (state NOT IN ('a', 'b', 'c') OR x)`, `CHECK (state NOT IN ('a', 'b', 'c') OR x)`},
	} {
		if got, _ := checksAsComparisons(c.in); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// After migrating, no table keeps a CHECK that SQLite evaluates through a
// temporary b-tree, and the rewritten checks still refuse what the old
// ones refused.
func TestSQLiteChecksRewritten(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for range 2 { // the second run finds nothing to do
		if err := Apply(ctx, db, SQLite); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND sql IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, s string
		if err := rows.Scan(&name, &s); err != nil {
			t.Fatal(err)
		}
		if _, n := checksAsComparisons(s); n > 0 {
			t.Errorf("table %s still has %d IN-list checks:\n%s", name, n, s)
		}
	}
	rows.Close()
	for _, q := range []string{
		`UPDATE jobs SET state = 'running', lease_deadline = 1 WHERE id = 'x'`,
		`INSERT INTO jobs (id, install_id, component_type, operation, state, max_attempts, timeout_ns, created_at) VALUES ('j', 'i', 'action', 'apply', 'queued', 1, 1, 1)`,
		`UPDATE installs SET state = 'active', health = 'healthy' WHERE id = 'i'`,
	} {
		plan, err := db.QueryContext(ctx, `EXPLAIN `+q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := plan.Columns()
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		for plan.Next() {
			if err := plan.Scan(vals...); err != nil {
				t.Fatal(err)
			}
			if op := *(vals[1].(*any)); op == "OpenEphemeral" {
				t.Errorf("%s: opens a temporary b-tree", q)
			}
		}
		plan.Close()
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO apps (id, name, created_at) VALUES ('a', 'a', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO installs (id, app_id, name, created_at) VALUES ('i', 'a', 'i', 1)`); err != nil {
		t.Fatal(err)
	}
	insert := func(id, state string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO jobs (id, install_id, component_type, operation, state, max_attempts, timeout_ns, created_at)
			VALUES (?, 'i', 'action', 'apply', ?, 1, 1, 1)`, id, state)
		return err
	}
	for _, st := range []string{"queued", "succeeded", "failed", "cancelled", "timed_out"} {
		if err := insert("j-"+st, st); err != nil {
			t.Errorf("state %s refused: %v", st, err)
		}
	}
	if err := insert("j-bad", "exploded"); err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("state exploded: got %v, want a CHECK failure", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE installs SET health = 'sickly' WHERE id = 'i'`); err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("health sickly: got %v, want a CHECK failure", err)
	}
}
