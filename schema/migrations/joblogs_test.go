package migrations

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	_ "modernc.org/sqlite"
)

// Migration 37 on SQLite: a job running at the upgrade starts its log
// cap from the lines it has stored (an ended job's count stays 0: it
// takes no more lines), and the migration goes down and up again.
func TestSQLiteJobLogCounts(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := Apply(ctx, db, SQLite); err != nil {
		t.Fatal(err)
	}
	sub, err := fsSub(SQLite)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithGoMigrations(sqliteGoMigrations()...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 34); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, q := range []string{
		`PRAGMA foreign_keys = OFF`,
		`INSERT INTO jobs (id, install_id, component_type, operation, state, max_attempts, timeout_ns, created_at, agent_id, lease_deadline)
			VALUES ('run', 'i', 'action', 'apply', 'running', 1, 1, 1, 'a', 9)`,
		`INSERT INTO jobs (id, install_id, component_type, operation, state, max_attempts, timeout_ns, created_at, agent_id, ended_at)
			VALUES ('done', 'i', 'action', 'apply', 'succeeded', 1, 1, 1, 'a', 5)`,
		`INSERT INTO job_logs (job_id, attempt, seq, at, stream, text) VALUES ('run', 1, 1, 1, 1, 'héllo'), ('run', 1, 2, 1, 1, 'world'),
			('done', 1, 1, 1, 1, 'bye')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.UpTo(ctx, 37); err != nil {
		t.Fatalf("up: %v", err)
	}
	for _, c := range []struct {
		id           string
		lines, bytes int64
	}{{"run", 2, 11}, {"done", 0, 0}} {
		var lines, bytes, pruned int64
		if err := db.QueryRowContext(ctx, `SELECT log_lines, log_bytes, logs_pruned_at FROM jobs WHERE id = ?`, c.id).Scan(&lines, &bytes, &pruned); err != nil {
			t.Fatal(err)
		}
		if lines != c.lines || bytes != c.bytes || pruned != 0 {
			t.Errorf("%s: %d lines, %d bytes, pruned at %d; want %d, %d, 0", c.id, lines, bytes, pruned, c.lines, c.bytes)
		}
	}
	if _, err := p.DownTo(ctx, 34); err != nil {
		t.Fatalf("down again: %v", err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
