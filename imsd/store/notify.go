package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL channels that carry wake-ups between imsd replicas.
const (
	jobsChannel = "byoc_jobs" // payload: an install ID with new or changed jobs
	logsChannel = "byoc_logs" // payload: a job ID with new log lines or a result
)

// notifyJobs wakes, on every replica, the agents of install installID. It
// is sent when tx commits. On SQLite there is one process, which wakes
// itself, so it does nothing.
func (s *Store) notifyJobs(ctx context.Context, tx *txn, installID string) error {
	return s.notify(ctx, tx, jobsChannel, installID)
}

// notifyLogs wakes, on every replica, the followers of job jobID's log.
func (s *Store) notifyLogs(ctx context.Context, tx *txn, jobID string) error {
	return s.notify(ctx, tx, logsChannel, jobID)
}

func (s *Store) notify(ctx context.Context, tx *txn, channel, payload string) error {
	if !s.postgres() {
		return nil
	}
	if tx.pgb != nil {
		// Sent with the batch's others at its end.
		tx.pgb.notes = append(tx.pgb.notes, [2]string{channel, payload})
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 10 * time.Second
)

// Listen delivers the wake-ups other replicas send: onJob with an install
// ID when that install's jobs changed (new, requeued or cancel requested),
// onLog with a job ID when its log grew or it ended. It holds a dedicated
// PostgreSQL connection, reconnects with backoff when it breaks (and then
// calls onJob for every install with queued jobs, since notifications sent
// meanwhile are lost), and returns nil when ctx ends. Callbacks run on
// Listen's goroutine and should not block.
//
// On SQLite Listen returns nil at once: a single process wakes itself.
func (s *Store) Listen(ctx context.Context, onJob func(installID string), onLog func(jobID string)) error {
	if !s.postgres() {
		return nil
	}
	backoff := listenMinBackoff
	for reconnect := false; ; reconnect = true {
		listened := s.listenOnce(ctx, reconnect, onJob, onLog)
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			backoff = listenMinBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// listenOnce listens on one connection until it fails or ctx ends. It
// reports whether it got as far as listening.
func (s *Store) listenOnce(ctx context.Context, resync bool, onJob, onLog func(string)) (listened bool) {
	conn, err := pgx.ConnectConfig(ctx, s.pg.Copy())
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	for _, ch := range []string{jobsChannel, logsChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return false
		}
	}
	if resync {
		ids, err := s.QueuedJobInstalls(ctx)
		if err != nil {
			return true
		}
		for _, id := range ids {
			onJob(id)
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		switch n.Channel {
		case jobsChannel:
			onJob(n.Payload)
		case logsChannel:
			onLog(n.Payload)
		}
	}
}
