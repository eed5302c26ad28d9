package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/imsd/store/pgtest"
	"github.com/byoc-dev/byoc/internal/auditchain"
)

// openReplicas opens n stores (replicas) on one new PostgreSQL database.
func openReplicas(t *testing.T, n int) (string, []*store.Store) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping PostgreSQL")
	}
	dsn := pgtest.Start(t)
	var ss []*store.Store
	for range n {
		s, err := store.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss = append(ss, s)
	}
	return dsn, ss
}

// verifyChain checks chain is whole, linked and n records long.
func verifyChain(t *testing.T, s *store.Store, chain string, n int) {
	t.Helper()
	rs, err := s.ListAuditRecords(context.Background(), store.AuditFilter{Chain: chain, OneChain: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := auditchain.Verify(rs); p != nil {
		t.Fatalf("chain %q: %v", chain, p)
	}
	if len(rs) != n {
		t.Fatalf("chain %q has %d records, want %d", chain, len(rs), n)
	}
}

func auditEv(chain string, i int) store.AuditEvent {
	return store.AuditEvent{Chain: chain, At: time.Now(), Kind: "test.appended", Actor: "test", Subject: fmt.Sprint(i)}
}

// TestPostgresAuditHeadsStaleAcrossReplicas: a replica whose cached head
// another replica moved on appends after it, not beside it.
func TestPostgresAuditHeadsStaleAcrossReplicas(t *testing.T) {
	_, ss := openReplicas(t, 2)
	a, b := ss[0], ss[1]
	ctx := context.Background()
	const chain = "inst_stale"
	for i, s := range []*store.Store{a, b, a, b, a} {
		if err := s.RecordAudit(ctx, auditEv(chain, i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	verifyChain(t, a, chain, 5)
	held, hits, stale := store.AuditHeadsCache(a)
	if held != 1 || hits != 2 || stale != 2 {
		t.Errorf("replica a's cache: %d heads, %d hits, %d stale; want 1, 2, 2 (its second and third appends found its head behind)", held, hits, stale)
	}
	// The replica that wrote last appends from its cache, with no read.
	if err := a.RecordAudit(ctx, auditEv(chain, 5)); err != nil {
		t.Fatal(err)
	}
	if _, hits, stale := store.AuditHeadsCache(a); hits != 3 || stale != 2 {
		t.Errorf("after a's own head: %d hits, %d stale; want 3, 2", hits, stale)
	}
	verifyChain(t, a, chain, 6)
	// The vendor chain is never cached.
	for i := range 3 {
		if err := a.RecordAudit(ctx, auditEv(store.VendorChain, i)); err != nil {
			t.Fatal(err)
		}
	}
	if held, _, _ := store.AuditHeadsCache(a); held != 1 {
		t.Errorf("cache holds %d heads after vendor-chain appends, want 1", held)
	}
	verifyChain(t, a, store.VendorChain, 3)
}

// TestPostgresAuditHeadsThreeReplicasAtOnce: three replicas append to the
// same chains at once, through the group commit and through writes of
// their own: no write fails, and every chain is whole and complete.
func TestPostgresAuditHeadsThreeReplicasAtOnce(t *testing.T) {
	_, ss := openReplicas(t, 3)
	ctx := context.Background()
	chains := []string{"inst_a", "inst_b", "inst_c", store.VendorChain}
	const workers, each = 6, 30
	var wg sync.WaitGroup
	errc := make(chan error, len(ss)*workers*each)
	for si, s := range ss {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					ev := auditEv(chains[(w+i)%len(chains)], si*10000+w*100+i)
					var err error
					if (w+i)%3 == 0 {
						err = store.AuditOwnTx(ctx, s, ev)
					} else {
						err = s.RecordAudit(ctx, ev)
					}
					if err != nil {
						errc <- fmt.Errorf("replica %d, worker %d, append %d: %w", si, w, i, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	want := map[string]int{}
	for range ss {
		for w := range workers {
			for i := range each {
				want[chains[(w+i)%len(chains)]]++
			}
		}
	}
	for _, c := range chains {
		verifyChain(t, ss[0], c, want[c])
	}
	var hits, stale int64
	for _, s := range ss {
		_, h, st := store.AuditHeadsCache(s)
		hits, stale = hits+h, stale+st
	}
	if hits == 0 {
		t.Error("no replica appended from a cached head")
	}
	t.Logf("%d appends from cached heads, %d batches run again for a stale one", hits, stale)
}

// TestPostgresAuditHeadsForgottenOnNewConnections: a database that went
// back (a restore, a failover to a standby that had not received the
// last commits) comes with new connections, and a replica then reads
// its heads again instead of leaving a gap after the cached one.
func TestPostgresAuditHeadsForgottenOnNewConnections(t *testing.T) {
	dsn, ss := openReplicas(t, 1)
	s := ss[0]
	ctx := context.Background()
	const chain = "inst_restored"
	for i := range 3 {
		if err := s.RecordAudit(ctx, auditEv(chain, i)); err != nil {
			t.Fatal(err)
		}
	}
	if held, _, _ := store.AuditHeadsCache(s); held != 1 {
		t.Fatalf("cache holds %d heads, want 1", held)
	}
	// The database loses the chain's last record, as a restore from a
	// backup taken before it would, and every connection ends.
	loseRecord(t, dsn, chain, 3)
	endConnections(t, dsn)
	appendRetrying(t, s, chain, 3)
	verifyChain(t, s, chain, 3)
}

// loseRecord deletes chain's record seq behind the stores' backs, as a
// restore from a backup taken before it would.
func loseRecord(t *testing.T, dsn, chain string, seq int64) {
	t.Helper()
	execAll(t, dsn, `ALTER TABLE audit_events DISABLE TRIGGER USER`,
		fmt.Sprintf(`DELETE FROM audit_events WHERE chain = '%s' AND seq = %d`, chain, seq),
		`ALTER TABLE audit_events ENABLE TRIGGER USER`)
}

// endConnections ends every other connection to the database, as a
// failover or a restart of the server does.
func endConnections(t *testing.T, dsn string) {
	t.Helper()
	execAll(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
}

func execAll(t *testing.T, dsn string, qs ...string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range qs {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// appendRetrying appends to chain; the first tries may meet a connection
// that ended, and a caller tries again, as agents and the CLI do.
func appendRetrying(t *testing.T, s *store.Store, chain string, i int) {
	t.Helper()
	var last error
	for range 10 {
		if last = s.RecordAudit(context.Background(), auditEv(chain, i)); last == nil {
			return
		}
	}
	t.Fatal(last)
}

// TestPostgresAuditHeadsCachedAppendTakesTheLock: an append from a
// cached head waits for the chain's advisory lock, which another writer
// (here one as an older imsd or a write of its own does it) holds while
// it reads the head and appends: that writer's record goes in, and the
// cached append follows it.
func TestPostgresAuditHeadsCachedAppendTakesTheLock(t *testing.T) {
	dsn, ss := openReplicas(t, 1)
	s := ss[0]
	ctx := context.Background()
	const chain = "inst_locked"
	if err := s.RecordAudit(ctx, auditEv(chain, 0)); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	var seq int64
	var hash string
	if err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM byoc_audit_heads(ARRAY[$1::TEXT])`, chain).Scan(&seq, &hash); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.RecordAudit(ctx, auditEv(chain, 2)) }()
	select {
	case err := <-done:
		t.Fatalf("the cached append ended while another writer held the chain's lock (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	r := auditchain.Next(&auditchain.Record{Seq: seq, Hash: hash}, auditchain.Record{Chain: chain, At: time.Now().UnixNano(), Kind: "test.appended", Actor: "other", Data: "{}"})
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit_events (chain, seq, at, kind, actor, subject, data, prev, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		r.Chain, r.Seq, r.At, r.Kind, r.Actor, r.Subject, r.Data, r.Prev, r.Hash); err != nil {
		t.Fatalf("the other writer's append: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	verifyChain(t, s, chain, 3)
	if _, _, stale := store.AuditHeadsCache(s); stale != 1 {
		t.Errorf("%d batches ran again for a stale head, want 1", stale)
	}
}

// TestPostgresAuditTails: an agent that keeps a copy of its install's
// chain is sent the records this imsd's group commit appended from
// memory (shown here by the database losing one, which the tail still
// sends), and what another replica appended from the database: a tail
// never answers "nothing new", since records it never saw may follow
// its newest.
func TestPostgresAuditTails(t *testing.T) {
	dsn, ss := openReplicas(t, 2)
	a, b := ss[0], ss[1]
	ctx := context.Background()
	const chain = "inst_tails"
	seqs := func(after int64) []int64 {
		t.Helper()
		rs, err := a.AuditRecordsToSend(ctx, chain, after)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range rs {
			out = append(out, r.Seq)
		}
		return out
	}
	for i := range 3 {
		if err := a.RecordAudit(ctx, auditEv(chain, i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(seqs(1)); got != "[2 3]" {
		t.Fatalf("after 1: %s, want [2 3]", got)
	}
	// Another replica appends record 4: the first's tail ends at 3.
	if err := b.RecordAudit(ctx, auditEv(chain, 3)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seqs(3)); got != "[4]" {
		t.Fatalf("after 3, record 4 from another replica: %s, want [4]", got)
	}
	// The first appends 5 (its cached head was stale: the batch ran
	// again); its tail starts again at 5.
	if err := a.RecordAudit(ctx, auditEv(chain, 4)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seqs(3)); got != "[4 5]" {
		t.Fatalf("after 3: %s, want [4 5]", got)
	}
	loseRecord(t, dsn, chain, 5)
	if got := fmt.Sprint(seqs(4)); got != "[5]" {
		t.Fatalf("after 4, from the tail: %s, want [5]", got)
	}
	// Every connection ends (as after a failover or a restore): the
	// next append empties the tails with the heads, and what is sent is
	// the database's again.
	endConnections(t, dsn)
	appendRetrying(t, a, "inst_other", 0)
	if got := fmt.Sprint(seqs(4)); got != "[]" {
		t.Fatalf("after 4, once the connections ended: %s, want [] (record 5 is gone from the database)", got)
	}
}
