package migrations

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	_ "modernc.org/sqlite"
)

// Migration 10 on SQLite: a job may end refused and names its mode; other
// states and modes are still refused by the database; the checks stay
// comparisons; and the migration goes down and up again.
func TestSQLitePermissionModes(t *testing.T) {
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
	mustExec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec(`PRAGMA foreign_keys = OFF`)
	insert := func(id, state, mode string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO jobs (id, install_id, component_type, operation, state, max_attempts, timeout_ns, created_at, mode)
			VALUES (?, 'i', 'action', 'apply', ?, 1, 1, 1, ?)`, id, state, mode)
		return err
	}
	if err := insert("j1", "refused", "deprovision"); err != nil {
		t.Fatalf("a refused job: %v", err)
	}
	if err := insert("j2", "exploded", "maintenance"); err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("an unknown state: got %v, want a CHECK failure", err)
	}
	if err := insert("j3", "queued", "root"); err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("an unknown mode: got %v, want a CHECK failure", err)
	}
	var create string
	if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE name = 'jobs'`).Scan(&create); err != nil {
		t.Fatal(err)
	}
	if _, n := checksAsComparisons(create); n > 0 || !strings.Contains(create, "state = 'refused'") {
		t.Errorf("jobs table after migration 10:\n%s", create)
	}
	var mode string
	mustExec(`INSERT INTO jobs (id, install_id, component_type, operation, state, max_attempts, timeout_ns, created_at) VALUES ('j4', 'i', 'action', 'apply', 'queued', 1, 1, 1)`)
	if err := db.QueryRowContext(ctx, `SELECT mode FROM jobs WHERE id = 'j4'`).Scan(&mode); err != nil || mode != "maintenance" {
		t.Errorf("default mode: %q, %v; want maintenance", mode, err)
	}

	sub, err := fsSub(SQLite)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithGoMigrations(sqliteGoMigrations()...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 9); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("down with a refused job: got %v, want a refusal naming it", err)
	}
	mustExec(`DELETE FROM jobs WHERE state = 'refused'`)
	if _, err := p.DownTo(ctx, 9); err != nil {
		t.Fatalf("down: %v", err)
	}
	if err := insert("j5", "refused", "maintenance"); err == nil {
		t.Error("version 9 accepted a job with a mode")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := insert("j6", "refused", "break_glass"); err != nil {
		t.Fatalf("a refused job after up again: %v", err)
	}
}
