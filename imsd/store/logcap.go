// Logs, bounded: each job's log is capped (lines and bytes), and the
// lines of jobs that ended long ago are removed (PruneLogs).

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The default log cap of one job, its attempts together. A deploy or
// an action that an operator reads to the end writes hundreds or a few
// thousand lines; Terraform's debug output of a large plan some tens of
// thousands. 100,000 lines keep all of those, and 64 MiB (some 650 bytes
// a line on average) bound a job that prints few, long lines. A fleet
// of a thousand installs whose every job fills both would still need a
// retention (PruneLogs), which is why the two come together.
const (
	DefaultLogMaxLines = 100_000
	DefaultLogMaxBytes = 64 << 20
)

// LogLimits caps how much of one job's log the store keeps: the lines of
// all its attempts together. Zero fields mean the defaults.
type LogLimits struct {
	Lines int64
	Bytes int64
}

func (l LogLimits) orDefault() LogLimits {
	if l.Lines <= 0 {
		l.Lines = DefaultLogMaxLines
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultLogMaxBytes
	}
	return l
}

// SetLogLimits sets the log cap of every job from now on. Call it before
// the store is shared: it is not synchronised.
func (s *Store) SetLogLimits(l LogLimits) { s.logLimits = l }

// LogLinesDropped reports how many log lines this store has dropped past
// the cap since it opened (not another replica's), for metrics.
func (s *Store) LogLinesDropped() int64 { return s.logDropped.Load() }

// insertLogs stores lines of job jobID's attempt, skipping those stored,
// up to the job's log cap, and drops the rest (dropLogs). The count is the
// job row's, in the transaction that inserts the lines, which holds the
// row (AppendLogs read it FOR UPDATE on PostgreSQL; SQLite has one
// writer): replicas of imsd appending to one job cannot pass the cap
// between them, not even by one line.
//
// It returns how many lines it dropped, for the caller to count once its
// transaction has committed.
func (s *Store) insertLogs(ctx context.Context, tx *txn, jobID string, attempt int, lines []LogLine) (int64, error) {
	if len(lines) == 0 {
		return 0, nil
	}
	lim := s.logLimits.orDefault()
	var usedLines, usedBytes int64
	var cutAttempt int
	if err := tx.QueryRowContext(ctx, s.bind(`SELECT log_lines, log_bytes, log_cut_attempt FROM jobs WHERE id = ?`), jobID).Scan(&usedLines, &usedBytes, &cutAttempt); err != nil {
		return 0, fmt.Errorf("read log count of job %s: %w", jobID, err)
	}
	texts := make([]string, len(lines))
	for i, l := range lines {
		texts[i] = cleanText(l.Text)
	}
	// The insert says which lines it stored (RETURNING), not those of a
	// batch sent again after a reconnect. On SQLite RETURNING made a
	// batch a third dearer (BenchmarkAppendLogs: SQLite stores the rows
	// to return, then steps through them), so there a batch past the
	// attempt's last stored line, all new (an agent sends in seq order,
	// and AppendLogs holds the job), is counted from the batch itself.
	// On PostgreSQL RETURNING is cheaper than the round trip of a read.
	resent := true
	if cutAttempt != attempt && !s.postgres() {
		var last int64
		err := tx.QueryRowContext(ctx, s.bind(`SELECT seq FROM job_logs WHERE job_id = ? AND attempt = ? ORDER BY seq DESC LIMIT 1`), jobID, attempt).Scan(&last)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("read last log line of job %s: %w", jobID, err)
		}
		resent = slices.ContainsFunc(lines, func(l LogLine) bool { return l.Seq <= last })
	}
	var addLines, addBytes int64
	rest, restTexts := lines, texts
	// Once an attempt is cut, its marker stays its last line: nothing
	// after it is stored, not even a short line that would fit.
	for len(rest) > 0 && cutAttempt != attempt {
		// The lines that fit if none was stored before; those that
		// were take no room, and the next turn fills it.
		n, b := 0, int64(0)
		for n < len(rest) && usedLines+addLines+int64(n)+1 <= lim.Lines && usedBytes+addBytes+b+int64(len(restTexts[n])) <= lim.Bytes {
			b += int64(len(restTexts[n]))
			n++
		}
		if n == 0 {
			break
		}
		stored, seqs, err := s.insertLogRows(ctx, tx, jobID, attempt, rest[:n], restTexts[:n], resent)
		if err != nil {
			return 0, err
		}
		switch {
		case stored == int64(n):
			addLines += int64(n)
			addBytes += b
		case !resent:
			// Not seen (AppendLogs holds the job): counted whole,
			// to err on the side of the cap.
			addLines += stored
			addBytes += b
		case len(seqs) > 0:
			size := make(map[int64]int64, n)
			for i, l := range rest[:n] {
				size[l.Seq] = int64(len(restTexts[i]))
			}
			for _, seq := range seqs {
				addLines++
				addBytes += size[seq]
			}
		}
		rest, restTexts = rest[n:], restTexts[n:]
	}
	if addLines > 0 {
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE jobs SET log_lines = log_lines + ?, log_bytes = log_bytes + ? WHERE id = ?`),
			addLines, addBytes, jobID); err != nil {
			return 0, fmt.Errorf("count log of job %s: %w", jobID, err)
		}
	}
	if len(rest) > 0 {
		return s.dropLogs(ctx, tx, jobID, attempt, rest, restTexts, lim)
	}
	return 0, nil
}

// dropLogs counts lines of job jobID's attempt that the cap keeps out on
// the attempt's cut (job_log_cuts) and writes its marker line: at the
// first line dropped, stream 3 (system), its text rewritten as the count
// grows. A line at or below the last seq counted (or, at the first cut,
// a line stored) was sent before, and is not counted again: exact for
// batches in seq order, as an agent sends them.
func (s *Store) dropLogs(ctx context.Context, tx *txn, jobID string, attempt int, lines []LogLine, texts []string, lim LogLimits) (int64, error) {
	var c struct{ seq, lastSeq, lines, bytes int64 }
	err := tx.QueryRowContext(ctx, s.bind(`SELECT seq, last_seq, lines, bytes FROM job_log_cuts WHERE job_id = ? AND attempt = ?`),
		jobID, attempt).Scan(&c.seq, &c.lastSeq, &c.lines, &c.bytes)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("read log cut of job %s: %w", jobID, err)
	}
	stored := map[int64]bool{}
	if !found {
		// The first cut of the attempt: a line sent again after a
		// reconnect may be stored already (the batch's resent lines
		// come first); any other is dropped.
		for start := 0; start < len(lines); start += logChunk {
			chunk := lines[start:min(start+logChunk, len(lines))]
			args := make([]any, 0, 2+len(chunk))
			args = append(args, jobID, attempt)
			for _, l := range chunk {
				args = append(args, l.Seq)
			}
			var have []int64
			if err := tx.SelectContext(ctx, &have, s.bind(`SELECT seq FROM job_logs WHERE job_id = ? AND attempt = ? AND seq IN (`+placeholders(len(chunk))+`)`), args...); err != nil {
				return 0, fmt.Errorf("read stored log lines of job %s: %w", jobID, err)
			}
			for _, seq := range have {
				stored[seq] = true
			}
		}
	}
	var (
		first   *LogLine
		dropped int64
		floor   = c.lastSeq
	)
	for i, l := range lines {
		if (found && l.Seq <= floor) || stored[l.Seq] {
			continue
		}
		if first == nil {
			first = &lines[i]
		}
		dropped++
		c.bytes += int64(len(texts[i]))
		c.lastSeq = max(c.lastSeq, l.Seq)
	}
	if dropped == 0 {
		return 0, nil
	}
	c.lines += dropped
	if !found {
		c.seq = first.Seq
		_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO job_log_cuts (job_id, attempt, seq, last_seq, lines, bytes) VALUES (?, ?, ?, ?, ?, ?)`),
			jobID, attempt, c.seq, c.lastSeq, c.lines, c.bytes)
		if err == nil {
			_, err = tx.ExecContext(ctx, s.bind(`UPDATE jobs SET log_cut_attempt = ? WHERE id = ?`), attempt, jobID)
		}
	} else {
		_, err = tx.ExecContext(ctx, s.bind(`UPDATE job_log_cuts SET last_seq = ?, lines = ?, bytes = ? WHERE job_id = ? AND attempt = ?`),
			c.lastSeq, c.lines, c.bytes, jobID, attempt)
	}
	if err != nil {
		return 0, fmt.Errorf("record log cut of job %s: %w", jobID, err)
	}
	var at int64
	if first != nil {
		at = nanos(first.Time)
	}
	// The marker's time is its first dropped line's; a later batch
	// rewrites only its text.
	if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO job_logs (job_id, attempt, seq, at, stream, text) VALUES (?, ?, ?, ?, 3, ?)
		ON CONFLICT (job_id, attempt, seq) DO UPDATE SET text = excluded.text`),
		jobID, attempt, c.seq, at, CutMarker(lim, c.lines, c.bytes)); err != nil {
		return 0, fmt.Errorf("write log cut marker of job %s: %w", jobID, err)
	}
	return dropped, nil
}

// CutMarkerPrefix starts the text of the line that stands for the lines
// dropped past a job's log cap. It is a warning in the SDK's leveled form
// (plugins/sdk/loglevel), so byoc job logs --level warn shows it too.
const CutMarkerPrefix = "[WARN]  imsd: dropped the rest of this attempt's log"

// CutMarker is the text of the line that stands for the lines dropped
// past a job's log cap: how many, and which limit and flag kept them out.
func CutMarker(lim LogLimits, lines, bytes int64) string {
	return fmt.Sprintf("%s: %d lines (%s) dropped, counted until the job ends. imsd keeps at most %d lines and %s of a job's log, its attempts together (imsd --job-log-max-lines, --job-log-max-bytes); the job goes on.",
		CutMarkerPrefix, lines, sizeText(bytes), lim.Lines, sizeText(lim.Bytes))
}

// sizeText is n bytes as people read them: 512 B, 1.5 KiB, 64 MiB.
func sizeText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	case n < 1<<30:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MiB"
	}
	return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<30))) + " GiB"
}

func trimZero(s string) string {
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}

// PrunedMarkerPrefix starts the text of the line that stands for a job's
// log removed under the log retention, a warning like CutMarkerPrefix.
const PrunedMarkerPrefix = "[WARN]  imsd: removed this job's log"

// PruneResult is what one PruneLogs call did.
type PruneResult struct {
	// JobID is the job whose lines it removed, "" when no job was due.
	JobID string
	// Lines is how many lines it removed.
	Lines int64
	// Done says the job has no line left but the marker.
	Done bool
}

// PruneLogs removes, in one short transaction, up to batch log lines (<= 0:
// 1000) of one job that ended more than retention before now and whose
// log was not pruned yet, oldest first; a job's last call marks it
// pruned. It leaves the job's row, result and audit events as they are,
// and one line (stream 3, attempt the job's last, seq 0) saying when and
// under which retention the log was removed, so a reader sees why it is
// gone. Call it until it returns no job. Replicas on PostgreSQL may call
// it at once: each takes a job the others do not hold (SKIP LOCKED).
func (s *Store) PruneLogs(ctx context.Context, retention time.Duration, now time.Time, batch int) (PruneResult, error) {
	if retention <= 0 {
		return PruneResult{}, nil
	}
	if batch <= 0 {
		batch = 1000
	}
	var res PruneResult
	err := s.write(ctx, "prune logs", func(tx *txn) error {
		res = PruneResult{}
		var id string
		var attempt int
		// The conditions name jobs_logs_unpruned's, so it serves them.
		err := tx.QueryRowContext(ctx, s.bind(`SELECT id, attempt FROM jobs
			WHERE logs_pruned_at = 0 AND ended_at > 0 AND ended_at < ? AND state IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'refused')
			ORDER BY ended_at LIMIT 1`+s.skipLocked()), nanos(now.Add(-retention))).Scan(&id, &attempt)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.JobID = id
		// The marker sits at seq 0, which no agent's line has (seqs
		// start at 1), and is never removed.
		var lastAttempt int
		var lastSeq int64
		err = tx.QueryRowContext(ctx, s.bind(`SELECT attempt, seq FROM job_logs WHERE job_id = ? AND seq > 0
			ORDER BY attempt, seq LIMIT 1 OFFSET ?`), id, batch-1).Scan(&lastAttempt, &lastSeq)
		var r sql.Result
		switch {
		case errors.Is(err, sql.ErrNoRows):
			res.Done = true
			r, err = tx.ExecContext(ctx, s.bind(`DELETE FROM job_logs WHERE job_id = ? AND seq > 0`), id)
		case err == nil:
			r, err = tx.ExecContext(ctx, s.bind(`DELETE FROM job_logs WHERE job_id = ? AND seq > 0 AND (attempt < ? OR (attempt = ? AND seq <= ?))`),
				id, lastAttempt, lastAttempt, lastSeq)
		}
		if err != nil {
			return err
		}
		if res.Lines, err = r.RowsAffected(); err != nil {
			return err
		}
		if res.Lines > 0 {
			if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO job_logs (job_id, attempt, seq, at, stream, text) VALUES (?, ?, 0, ?, 3, ?)
				ON CONFLICT DO NOTHING`), id, max(attempt, 1), nanos(now), PrunedMarker(retention, now)); err != nil {
				return err
			}
		}
		if !res.Done {
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.bind(`DELETE FROM job_log_cuts WHERE job_id = ?`), id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.bind(`UPDATE jobs SET logs_pruned_at = ? WHERE id = ?`), nanos(now), id)
		return err
	})
	return res, err
}

// PrunedMarker is the text of the line that stands for a job's log
// removed under the log retention.
func PrunedMarker(retention time.Duration, now time.Time) string {
	return fmt.Sprintf("%s on %s: imsd keeps job logs for %s after a job ends (imsd --job-log-retention). The job's result and audit events are kept.",
		PrunedMarkerPrefix, now.UTC().Format("2006-01-02 15:04 UTC"), retention)
}
