package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// EnqueueKey is the idempotency key of one enqueue request.
type EnqueueKey struct {
	// Key is the client's key. Keys are scoped to the vendor: one
	// namespace for the whole database.
	Key string
	// RequestHash identifies what the request asked for (the caller
	// computes it, without the key): the key with another hash is refused.
	RequestHash string
	// At is when the request arrived; ExpiresAt, after At, is when the key
	// may be used again for another request.
	At, ExpiresAt time.Time
}

// Field names in the errors of EnqueueJobsKeyed.
const keyField = "idempotency_key"

func (k EnqueueKey) check() error {
	switch {
	case k.Key == "":
		return errs.Field(keyField, "required")
	case k.RequestHash == "":
		return errs.Field("request_hash", "required")
	}
	if err := requireTime("at", k.At); err != nil {
		return err
	}
	if !k.ExpiresAt.After(k.At) {
		return errs.Field("expires_at", "must be after at")
	}
	return nil
}

// EnqueueJobsKeyed is EnqueueJobs with an idempotency key, recorded in the
// transaction that stores the jobs, so both are stored or neither. While
// the key is live (At before its ExpiresAt) a request with the same key
// and the same RequestHash stores nothing and returns the jobs the key's
// first request stored, in order and as they are now, with replayed set;
// another RequestHash is refused with a Conflict naming idempotency_key.
// A key past its ExpiresAt counts as unused. Two requests with one key at
// once, on one store or two, store the jobs once: the second waits for the
// first's transaction and then replays it.
func (s *Store) EnqueueJobsKeyed(ctx context.Context, key EnqueueKey, jobs []NewJob) (out []Job, replayed bool, err error) {
	if err := key.check(); err != nil {
		return nil, false, err
	}
	configs, err := checkNewJobs(jobs)
	if err != nil {
		return nil, false, err
	}
	ids := make([]string, len(jobs))
	for i, n := range jobs {
		if strings.Contains(n.ID, ",") {
			return nil, false, errs.Field(fmt.Sprintf("jobs[%d].id", i), "must not contain a comma")
		}
		ids[i] = n.ID
	}
	call := takeCallRecord(ctx)
	defer func() { call.done(err) }()
	err = s.write(ctx, "enqueue jobs", func(tx *txn) error {
		out, replayed = nil, false
		if err := call.audit(ctx, s, tx); err != nil {
			return err
		}
		// The key goes in first: on PostgreSQL a concurrent request with
		// the same key waits here for this transaction to end, then finds
		// the key taken. An expired key is taken over in the same step.
		res, err := tx.ExecContext(ctx, s.bind(`INSERT INTO enqueue_keys (key, request_hash, job_ids, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET request_hash = excluded.request_hash, job_ids = excluded.job_ids,
				created_at = excluded.created_at, expires_at = excluded.expires_at
			WHERE enqueue_keys.expires_at <= ?`),
			key.Key, key.RequestHash, strings.Join(ids, ","), nanos(key.At), nanos(key.ExpiresAt), nanos(key.At))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			out, err = s.insertNewJobs(ctx, tx, jobs, configs)
			return err
		}
		replayed = true
		out, err = s.replayKey(ctx, tx, key)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, replayed, nil
}

// replayKey returns the jobs a live key's first request stored, or a
// Conflict when key comes with another request.
func (s *Store) replayKey(ctx context.Context, tx *txn, key EnqueueKey) ([]Job, error) {
	var hash, list string
	err := tx.QueryRowContext(ctx, s.bind(`SELECT request_hash, job_ids FROM enqueue_keys WHERE key = ?`), key.Key).Scan(&hash, &list)
	if errors.Is(err, sql.ErrNoRows) {
		// Only a key deleted between the two statements gets here.
		return nil, errs.E(errs.Unavailable, "idempotency key %q changed during the request; try again", key.Key)
	}
	if err != nil {
		return nil, err
	}
	if hash != key.RequestHash {
		return nil, &errs.Error{Code: errs.Conflict, Field: keyField,
			Message: "was used with a different request; use a new key for each new request"}
	}
	ids := strings.Split(list, ",")
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := selectJobRows(ctx, tx, s.bind(`SELECT `+jobCols+` FROM jobs WHERE id IN (`+placeholders(len(ids))+`)`), args...)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]jobRow, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	out := make([]Job, len(ids))
	for i, id := range ids {
		r, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("idempotency key %q: job %s is gone", key.Key, id)
		}
		if out[i], err = r.job(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeleteExpiredEnqueueKeys deletes the idempotency keys whose ExpiresAt is
// not after now and returns how many it deleted. Expired keys already
// count as unused; this only bounds the table.
func (s *Store) DeleteExpiredEnqueueKeys(ctx context.Context, now time.Time) (int64, error) {
	if err := requireTime("now", now); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, "delete expired enqueue keys", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`DELETE FROM enqueue_keys WHERE expires_at <= ?`), nanos(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
