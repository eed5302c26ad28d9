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
