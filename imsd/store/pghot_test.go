package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// TestPostgresAckAndRenewalsUpdateInPlace: on PostgreSQL a job's ack and
// its lease renewals change no column that an index of jobs names
// (migration 36: the indexes on live jobs name phase, in which assigned
// and running are one), and the table leaves room on its pages, so each
// is a HOT update: the row's new version goes on its page and no index
// gains an entry. Before, each added an entry to all five indexes. So
// is a log batch's count of its lines (the log cap). The finish still moves the job out of its phase and is not in place.
func TestPostgresAckAndRenewalsUpdateInPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping PostgreSQL")
	}
	ctx := context.Background()
	dsn := pgtest.Start(t)
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{ID: "app-1", Name: "shop", CreatedAt: t0}))
	must(s.CreateInstall(ctx, store.Install{ID: "inst-1", AppID: "app-1", Name: "acme", CreatedAt: t0},
		store.EnrollmentToken{Hash: "hash-inst", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	must(s.CreateEnrollmentToken(ctx, store.EnrollmentToken{Hash: "hash-ag", InstallID: "inst-1", ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}))
	if _, err := s.Enroll(ctx, "hash-ag", store.Agent{ID: "ag-1", PublicKey: []byte("key"), Hostname: "host", Version: "v1"}, t0); err != nil {
		t.Fatal(err)
	}

	const n = 60
	var leases []store.Lease
	var jobs []store.Job
	for i := range n {
		j, assigned, err := s.EnqueueAssigned(ctx, store.Job{
			ID: fmt.Sprintf("job-%02d", i), InstallID: "inst-1", ComponentType: "terraform", Component: "network", Operation: "apply",
			Config: []byte(`{"dir":"infra"}`), MaxAttempts: 3, Timeout: 10 * time.Minute, CreatedAt: t0, CreatedBy: "tok-admin",
		}, "ag-1", t0.Add(time.Minute))
		must(err)
		if !assigned {
			t.Fatalf("job %d was not assigned at enqueue", i)
		}
		jobs = append(jobs, j)
		leases = append(leases, store.Lease{JobID: j.ID, FencingToken: j.FencingToken})
	}
	for _, j := range jobs {
		must(s.AckJob(ctx, j.ID, store.Writer{AgentID: "ag-1", FencingToken: j.FencingToken}, t0.Add(2*time.Minute), t0.Add(time.Second)))
	}
	for r := range 2 {
		renewed, lost, err := s.RenewLeases(ctx, "ag-1", leases, t0.Add(time.Duration(3+r)*time.Minute))
		must(err)
		if len(renewed) != n || len(lost) != 0 {
			t.Fatalf("renewal %d: renewed %d, lost %d", r+1, len(renewed), len(lost))
		}
	}
	// A log batch counts its lines on the job's row (the log cap,
	// migration 37): no index names the counts either.
	for _, j := range jobs {
		must(s.AppendLogs(ctx, j.ID, store.Writer{AgentID: "ag-1", FencingToken: j.FencingToken},
			[]store.LogLine{{Seq: 1, Time: t0, Stream: 1, Text: "hello"}, {Seq: 2, Time: t0, Stream: 2, Text: "world"}}))
	}
	for _, j := range jobs[:n/2] {
		_, err := s.FinishJob(ctx, j.ID, store.Writer{AgentID: "ag-1", FencingToken: j.FencingToken}, store.Result{State: store.JobSucceeded}, t0.Add(4*time.Minute))
		must(err)
	}
	// A backend reports its counts when its connection ends.
	s.Close()

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const acks, renewals, logs, finishes = n, 2 * n, n, n / 2
	var upd, hot int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		must(db.QueryRowContext(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'jobs'`).Scan(&upd, &hot))
		if upd >= acks+renewals+logs+finishes || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("jobs: %d updates, %d of them in place (HOT)", upd, hot)
	if upd != acks+renewals+logs+finishes {
		t.Fatalf("jobs had %d updates, want %d (acks %d, renewals %d, log batches %d, finishes %d)", upd, acks+renewals+logs+finishes, acks, renewals, logs, finishes)
	}
	if hot != acks+renewals+logs {
		t.Errorf("%d of the %d acks, lease renewals and log batches updated their row in place, want all (and none of the %d finishes)", hot, acks+renewals+logs, finishes)
	}
}
