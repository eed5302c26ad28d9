package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// The batched ack's and finish's statements, for TestPostgresJobPlans.
const PGAckSQL, PGFinishSQL = pgAckSQL, pgFinishSQL

// HoldPool takes every connection of s's PostgreSQL pool in an open
// transaction, as a hello storm does, until release.
func HoldPool(ctx context.Context, s *Store) (release func(), err error) {
	var txs []*sqlx.Tx
	release = func() {
		for _, tx := range txs {
			tx.Rollback() //nolint:errcheck
		}
	}
	for range postgresConns {
		tx, err := s.w.BeginTxx(ctx, nil)
		if err != nil {
			release()
			return nil, err
		}
		txs = append(txs, tx)
	}
	return release, nil
}

// AuditOwnTx appends ev in a write of its own (flushAudit), not the
// group commit's (RecordAudit).
func AuditOwnTx(ctx context.Context, s *Store, ev AuditEvent) error {
	return s.write(ctx, "test audit", func(tx *txn) error { return s.Audit(ctx, tx, ev) })
}

// AuditHeadsCache reports how many heads s's PostgreSQL cache holds, how
// many times the group commit took one, and how many batches ran again
// for a stale one.
func AuditHeadsCache(s *Store) (held int, hits, stale int64) {
	return s.pgh.len(), s.pgh.hits.Load(), s.pgh.stale.Load()
}
