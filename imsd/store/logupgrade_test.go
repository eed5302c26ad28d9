package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/schema/migrations"
)

// Migration 37 on a database that imsd at version 36 wrote, on both
// dialects: each job not ended at the upgrade (queued for a retry,
// assigned, running) starts its log cap from the lines it has stored,
// counted in bytes as the store counts them (UTF-8, not characters); an
// ended job's count stays 0; and the cap holds exactly on the next
// batches of the jobs running at the upgrade: a batch sent again is not
// counted twice, the lines past the cap are dropped under one marker,
// and a job already past the cap at the upgrade stores nothing more.
// SQLite's step alone is also TestSQLiteJobLogCounts (schema/migrations).
func TestJobLogCountsAtUpgrade(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testJobLogCountsAtUpgrade(t, migrations.SQLite, filepath.Join(t.TempDir(), "byoc.db"), "sqlite")
	})
	t.Run("postgres", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: skipping PostgreSQL")
		}
		testJobLogCountsAtUpgrade(t, migrations.Postgres, pgtest.Start(t), "pgx")
	})
}

func testJobLogCountsAtUpgrade(t *testing.T, dialect, dsn, driver string) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The install and its agent, as the store makes them.
	s, err := store.Open(ctx, dsn)
	must(err)
	must(s.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}))
	must(s.CreateInstall(ctx, store.Install{ID: "inst-acme", AppID: "app-1", Name: "acme", CreatedAt: t0},
		store.EnrollmentToken{Hash: "hash-inst", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	must(s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "hash-ag", InstallID: "inst-acme", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	_, err = s.Enroll(ctx, "hash-ag", store.Agent{ID: "ag-1", PublicKey: []byte("key"), Hostname: "host", Version: "v1"}, t0.Add(time.Minute))
	must(err)
	must(s.Close())

	// Back to version 36, where imsd kept no count, and the jobs it left
	// there: one in each state, each with lines.
	path := dsn
	if dialect == migrations.SQLite {
		path += "?_pragma=foreign_keys(1)"
	}
	db, err := sql.Open(driver, path)
	must(err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	must(migrations.MigrateTo(ctx, db, dialect, 36))
	type job struct {
		id, state     string
		attempt       int
		token         int64
		lines         []string // attempt 1's, seq 1..
		wantLines     int64
		wantBytes     int64
		ended, leased bool
	}
	texts := func(n int) []string {
		var out []string
		for i := 1; i <= n; i++ {
			out = append(out, fmt.Sprintf("line %d", i))
		}
		return out
	}
	size := func(ls []string) (b int64) {
		for _, l := range ls {
			b += int64(len(l))
		}
		return b
	}
	running := []string{"héllo", "wörld ✓", "line 3", "line 4", "line 5", "line 6", "line 7", "line 8"}
	jobs := []job{
		{id: "queued", state: "queued", attempt: 1, lines: texts(3)}, // its lease expired: a retry waits
		{id: "assigned", state: "assigned", attempt: 1, token: 11, lines: texts(2), leased: true},
		{id: "running", state: "running", attempt: 1, token: 12, lines: running, leased: true},
		{id: "over", state: "running", attempt: 1, token: 13, lines: texts(12), leased: true}, // past the cap already
	}
	for _, st := range []string{"succeeded", "failed", "cancelled", "timed_out", "refused"} {
		jobs = append(jobs, job{id: st, state: st, attempt: 1, token: 20, lines: texts(4), ended: true})
	}
	for i := range jobs {
		j := &jobs[i]
		if !j.ended {
			j.wantLines, j.wantBytes = int64(len(j.lines)), size(j.lines)
		}
		agent, lease, ended := "", int64(0), int64(0)
		if j.leased || j.ended {
			agent = "ag-1"
		}
		if j.leased {
			lease = t0.Add(time.Hour).UnixNano()
		}
		if j.ended {
			ended = t0.Add(time.Minute).UnixNano()
		}
		q := fmt.Sprintf(`INSERT INTO jobs (id, install_id, component_type, operation, state, attempt, max_attempts, timeout_ns, fencing_token, agent_id, lease_deadline, created_at, ended_at)
			VALUES ('%s', 'inst-acme', 'terraform', 'apply', '%s', %d, 3, 600000000000, %d, '%s', %d, %d, %d)`,
			j.id, j.state, j.attempt, j.token, agent, lease, t0.Add(time.Duration(i)*time.Second).UnixNano(), ended)
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for seq, text := range j.lines {
			q := fmt.Sprintf(`INSERT INTO job_logs (job_id, attempt, seq, at, stream, text) VALUES ('%s', 1, %d, %d, 1, '%s')`,
				j.id, seq+1, t0.UnixNano(), text)
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}

	must(migrations.MigrateTo(ctx, db, dialect, 37))
	for _, j := range jobs {
		var lines, bytes, cut, pruned int64
		must(db.QueryRowContext(ctx, fmt.Sprintf(`SELECT log_lines, log_bytes, log_cut_attempt, logs_pruned_at FROM jobs WHERE id = '%s'`, j.id)).Scan(&lines, &bytes, &cut, &pruned))
		if lines != j.wantLines || bytes != j.wantBytes || cut != 0 || pruned != 0 {
			t.Errorf("%s (%s) after migration 37: %d lines, %d bytes, cut attempt %d, pruned at %d; want %d, %d, 0, 0",
				j.id, j.state, lines, bytes, cut, pruned, j.wantLines, j.wantBytes)
		}
	}
	must(db.Close())

	// imsd upgraded: the cap holds on the next batches.
	s, err = store.Open(ctx, dsn)
	must(err)
	defer s.Close()
	lim := store.LogLimits{Lines: 10, Bytes: 1 << 20}
	s.SetLogLimits(lim)
	batch := func(attempt int, from, to int64) []store.LogLine {
		var out []store.LogLine
		for seq := from; seq <= to; seq++ {
			text := fmt.Sprintf("line %d", seq)
			if attempt == 1 && seq <= int64(len(running)) {
				text = running[seq-1] // the running job's own, sent again
			}
			out = append(out, store.LogLine{Attempt: attempt, Seq: seq, Time: t0.Add(time.Duration(seq) * time.Millisecond), Stream: 1, Text: text})
		}
		return out
	}
	w := func(token int64) store.Writer { return store.Writer{AgentID: "ag-1", FencingToken: token} }
	// running: 7 and 8 were stored (sent again after a reconnect), 9
	// and 10 fill the cap, 11 and 12 are dropped.
	must(s.AppendLogs(ctx, "running", w(12), batch(1, 7, 12)))
	// assigned: 3..10 fill it, 11 and 12 are dropped.
	must(s.AppendLogs(ctx, "assigned", w(11), batch(1, 3, 12)))
	// over: 12 stored at the upgrade, past the cap of 10: 13 and 14
	// are dropped.
	must(s.AppendLogs(ctx, "over", w(13), batch(1, 13, 14)))
	// queued: its retry shares the cap with attempt 1's 3 lines: 7 fit.
	claimed, err := s.ClaimJobs(ctx, "inst-acme", store.Writer{AgentID: "ag-1"}, 1, t0.Add(2*time.Hour), t0.Add(time.Hour))
	must(err)
	if len(claimed) != 1 || claimed[0].ID != "queued" || claimed[0].Attempt != 2 {
		t.Fatalf("claimed %+v, want the queued job's attempt 2", claimed)
	}
	must(s.AppendLogs(ctx, "queued", store.Writer{AgentID: "ag-1", FencingToken: claimed[0].FencingToken}, batch(2, 1, 9)))

	for _, c := range []struct {
		id                string
		kept              int
		markerAt          [2]int64 // attempt, seq
		dropped, dropSize int64
	}{
		{"running", 10, [2]int64{1, 11}, 2, int64(len("line 11") + len("line 12"))},
		{"assigned", 10, [2]int64{1, 11}, 2, int64(len("line 11") + len("line 12"))},
		{"over", 12, [2]int64{1, 13}, 2, int64(len("line 13") + len("line 14"))},
		{"queued", 10, [2]int64{2, 8}, 2, int64(len("line 8") + len("line 9"))},
	} {
		all, err := s.ListLogs(ctx, c.id, 0, 0, 1000)
		must(err)
		var kept int
		var markers []store.LogLine
		for _, l := range all {
			if l.Stream == 3 {
				markers = append(markers, l)
			} else {
				kept++
			}
		}
		want := store.CutMarker(lim, c.dropped, c.dropSize)
		if kept != c.kept || len(markers) != 1 || markers[0].Attempt != int(c.markerAt[0]) || markers[0].Seq != c.markerAt[1] || markers[0].Text != want {
			t.Errorf("%s: %d lines kept, markers %+v; want %d kept and one marker at %v: %q", c.id, kept, markers, c.kept, c.markerAt, want)
		}
		if c.id == "running" && all[0].Text != "héllo" {
			t.Errorf("running: first line %q, want héllo", all[0].Text)
		}
	}
	if n := s.LogLinesDropped(); n != 8 {
		t.Errorf("dropped %d lines, want 8", n)
	}
}
