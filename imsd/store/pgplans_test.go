package store_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// TestPostgresJobPlans checks that the queries on jobs that the indexes of
// jobs serve still find their rows through an index on a populated table
// (100,000 jobs, almost all succeeded, as a vendor's database is after a
// while), so that narrowing or dropping an index (migration 32 made
// jobs_state_lease a partial index of the jobs that have not succeeded;
// migration 36 indexes phase instead of state; migration 37 adds the
// log pruner's) cannot turn one of them
// into a scan of every job. The queries are the shapes the store sends
// on PostgreSQL (the phase conditions are Store.phaseIs), with literal
// values.
func TestPostgresJobPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping PostgreSQL")
	}
	ctx := context.Background()
	dsn := pgtest.Start(t)
	s, err := store.Open(ctx, dsn) // migrates
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO apps (id, name, created_at) VALUES ('app', 'app', 1)`,
		`INSERT INTO installs (id, app_id, name, created_at) SELECT 'i' || g, 'app', 'n' || g, 1 FROM generate_series(1, 200) g`,
		// One job in 1,000 queued, running, assigned, failed; the rest succeeded.
		`INSERT INTO jobs (id, install_id, component_type, operation, state, attempt, max_attempts, timeout_ns,
			agent_id, lease_deadline, created_at, started_at, ended_at)
		SELECT 'j' || lpad(g::TEXT, 7, '0'), 'i' || (g % 200 + 1), 't', 'deploy',
			(ARRAY['queued', 'running', 'assigned', 'failed'])[g % 1000 + 1], 1, 1, 60000000000,
			CASE WHEN g % 1000 = 0 THEN '' ELSE 'a' || (g % 200) END,
			CASE WHEN g % 1000 IN (1, 2) THEN 1000000 + g ELSE 0 END, g, g, 0
		FROM generate_series(1, 100000) g WHERE g % 1000 < 4`,
		`INSERT INTO jobs (id, install_id, component_type, operation, state, attempt, max_attempts, timeout_ns,
			agent_id, created_at, started_at, ended_at)
		SELECT 'j' || lpad(g::TEXT, 7, '0'), 'i' || (g % 200 + 1), 't', 'deploy', 'succeeded', 1, 1, 60000000000,
			'a' || (g % 200), g, g, g + 1
		FROM generate_series(1, 100000) g WHERE g % 1000 >= 4`,
		// 300 jobs assigned, as on a busy server.
		`UPDATE jobs SET state = 'assigned', agent_id = 'a', lease_deadline = 1 WHERE id IN (SELECT id FROM jobs ORDER BY created_at DESC LIMIT 300)`,
		`ANALYZE jobs`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// want: the index the query must use, where the plan matters most.
	for _, c := range []struct{ name, q, want string }{
		{"sweeper (ExpireLeases)", `SELECT id FROM jobs
			WHERE phase IN ('held') AND ((state IN ('assigned', 'running') AND lease_deadline < 1050000)
			   OR (state = 'running' AND started_at < 5000 - timeout_ns))
			ORDER BY created_at, id FOR UPDATE SKIP LOCKED`, "jobs_phase"},
		{"fleet counts (Fleet)", `SELECT install_id, state, COUNT(*) AS n FROM jobs
			WHERE phase IN ('queued', 'held') AND state IN ('queued', 'assigned', 'running') GROUP BY install_id, state`, "jobs_phase"},
		{"queued installs (QueuedJobInstalls)", `SELECT DISTINCT install_id FROM jobs WHERE phase IN ('queued') AND state = 'queued' ORDER BY install_id`, ""},
		{"claim (ClaimJobs)", `SELECT id, created_at FROM jobs WHERE install_id = 'i7' AND phase IN ('queued') AND state = 'queued'
			ORDER BY created_at, id LIMIT 10 FOR UPDATE SKIP LOCKED`, "jobs_queued"},
		{"listing of an install (ListJobs)", `SELECT id FROM jobs WHERE install_id = 'i7' ORDER BY created_at DESC, id DESC LIMIT 51`, ""},
		{"listing (ListJobs)", `SELECT id FROM jobs ORDER BY created_at DESC, id DESC LIMIT 51`, ""},
		{"listing of failed jobs (ListJobs)", `SELECT id FROM jobs WHERE phase IN ('failed') AND state IN ('failed') ORDER BY created_at DESC, id DESC LIMIT 51`, "jobs_phase"},
		{"listing of running jobs (ListJobs)", `SELECT id FROM jobs WHERE phase IN ('held') AND state IN ('running', 'assigned') ORDER BY created_at DESC, id DESC LIMIT 51`, "jobs_phase"},
		{"listing of succeeded jobs (ListJobs)", `SELECT id FROM jobs WHERE phase IN ('succeeded') AND state IN ('succeeded') ORDER BY created_at DESC, id DESC LIMIT 51`, ""},
		{"log pruner (PruneLogs)", `SELECT id, attempt FROM jobs
			WHERE logs_pruned_at = 0 AND ended_at > 0 AND ended_at < 50000 AND state IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'refused')
			ORDER BY ended_at LIMIT 1 FOR UPDATE SKIP LOCKED`, "jobs_logs_unpruned"},
		{"busy drift check (FireDriftCheck)", `SELECT COUNT(*) FROM jobs WHERE install_id = 'i7' AND component = 'c' AND operation = 'drift'
			AND phase IN ('queued', 'held') AND state IN ('queued', 'assigned', 'running')`, ""},
	} {
		rows, err := db.QueryContext(ctx, `EXPLAIN `+c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		t.Logf("%s:\n%s", c.name, p)
		if strings.Contains(p, "Seq Scan on jobs") {
			t.Errorf("%s reads every job:\n%s", c.name, p)
		}
		if c.want != "" && !strings.Contains(p, " using "+c.want+" on jobs") {
			t.Errorf("%s does not use %s:\n%s", c.name, c.want, p)
		}
	}

	// The group commit's batched ack and finish, as prepared statements
	// planned for their parameters (as PostgreSQL does for the first five
	// runs, and after while that is not dearer than a generic plan), on a
	// batch of 100: each job found by its primary key. Before, both read
	// every assigned job through the state index and hash-joined them
	// with the batch.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		`SET plan_cache_mode = force_custom_plan`,
		`PREPARE ack(TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[]) AS ` + store.PGAckSQL,
		`PREPARE fin(TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], INTEGER[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[]) AS ` + store.PGFinishSQL,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var ids string
	if err := conn.QueryRowContext(ctx, `SELECT string_agg(quote_literal(id), ', ') FROM (SELECT id FROM jobs WHERE state = 'assigned' LIMIT 100) b`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	batch := `ARRAY[` + ids + `]::TEXT[]`
	fill := func(v string) string { return `array_fill(` + v + `, ARRAY[100])` }
	for name, q := range map[string]string{
		"batched ack": `EXPLAIN EXECUTE ack(` + batch + `, ` + fill(`'a'::TEXT`) + `, ` + fill(`1::BIGINT`) + `, ` + fill(`1::BIGINT`) + `, ` + fill(`1::BIGINT`) + `)`,
		"batched finish": `EXPLAIN EXECUTE fin(` + batch + `, ` + fill(`'a'::TEXT`) + `, ` + fill(`1::BIGINT`) + `, ` + fill(`'succeeded'::TEXT`) + `, ` +
			fill(`1::BIGINT`) + `, ` + fill(`0`) + `, ` + fill(`''::TEXT`) + `, ` + fill(`''::TEXT`) + `, ` + fill(`''::TEXT`) + `, ` + fill(`''::TEXT`) + `, ` + fill(`''::TEXT`) + `)`,
	} {
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		t.Logf("%s:\n%s", name, p)
		if !strings.Contains(p, "Index Scan using jobs_pkey on jobs") || strings.Contains(p, "jobs_state") || strings.Contains(p, "Seq Scan on jobs") {
			t.Errorf("%s does not find each job by its primary key:\n%s", name, p)
		}
	}
}
