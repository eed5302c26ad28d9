package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// logChunk is how many lines one INSERT carries: 6 parameters a line stays
// far below SQLite's and PostgreSQL's parameter limits.
const logChunk = 500

// AppendLogs stores log lines of job jobID written by w, under the job's
// current attempt (the lines' Attempt fields are ignored). A line whose
// (attempt, seq) is already stored is skipped, so resending a batch after
// a reconnect is harmless. Past the job's log cap (SetLogLimits) lines are
// dropped, counted on one marker line, and AppendLogs still succeeds.
func (s *Store) AppendLogs(ctx context.Context, jobID string, w Writer, lines []LogLine) error {
	for i, l := range lines {
		if l.Stream < 1 || l.Stream > 3 {
			return errs.Field(fmt.Sprintf("lines[%d].stream", i), "must be 1 (stdout), 2 (stderr) or 3 (system), got %d", l.Stream)
		}
	}
	var dropped int64
	err := s.write(ctx, "append logs", func(tx *txn) error {
		dropped = 0
		attempt, err := s.heldAttempt(ctx, tx, jobID, w)
		if err != nil {
			return err
		}
		if len(lines) == 0 {
			return nil
		}
		if dropped, err = s.insertLogs(ctx, tx, jobID, attempt, lines); err != nil {
			return err
		}
		return s.notifyLogs(ctx, tx, jobID)
	})
	if err == nil {
		s.logDropped.Add(dropped)
	}
	return err
}

// insertLogRows inserts lines of job jobID's attempt, skipping those
// stored, and returns how many it inserted and, when returning is set,
// their seqs. texts are the lines' texts, cleaned.
func (s *Store) insertLogRows(ctx context.Context, tx *txn, jobID string, attempt int, lines []LogLine, texts []string, returning bool) (int64, []int64, error) {
	var (
		n        int64
		inserted []int64
	)
	for start := 0; start < len(lines); start += logChunk {
		c := lines[start:min(start+logChunk, len(lines))]
		args := make([]any, 0, 6*len(c))
		var b strings.Builder
		b.WriteString(`INSERT INTO job_logs (job_id, attempt, seq, at, stream, text) VALUES `)
		for i, l := range c {
			if i > 0 {
				b.WriteString(`, `)
			}
			b.WriteString(`(?, ?, ?, ?, ?, ?)`)
			args = append(args, jobID, attempt, l.Seq, nanos(l.Time), l.Stream, texts[start+i])
		}
		b.WriteString(` ON CONFLICT DO NOTHING`)
		if !returning {
			r, err := tx.ExecContext(ctx, s.bind(b.String()), args...)
			if err != nil {
				return 0, nil, err
			}
			k, err := r.RowsAffected()
			if err != nil {
				return 0, nil, err
			}
			n += k
			continue
		}
		// RETURNING tells the lines stored now from those sent again,
		// which the cap must not count twice.
		b.WriteString(` RETURNING seq`)
		rows, err := tx.QueryContext(ctx, s.bind(b.String()), args...)
		if err != nil {
			return 0, nil, err
		}
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return 0, nil, err
			}
			inserted = append(inserted, seq)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return 0, nil, err
		}
		n += int64(len(inserted))
	}
	return n, inserted, nil
}

// heldAttempt returns the attempt of job jobID if w holds its lease, and
// otherwise the error checkWriter gives. The row stays locked on
// PostgreSQL until tx ends.
func (s *Store) heldAttempt(ctx context.Context, tx *txn, jobID string, w Writer) (int, error) {
	var attempt int
	err := tx.GetContext(ctx, &attempt, s.bind(`SELECT attempt FROM jobs
		WHERE id = ? AND agent_id = ? AND agent_id <> '' AND fencing_token = ?`+s.forUpdate()), jobID, w.AgentID, w.FencingToken)
	if !errors.Is(err, sql.ErrNoRows) {
		return attempt, err
	}
	j, err := s.jobForWrite(ctx, tx, jobID)
	if err != nil {
		return 0, err
	}
	if err := s.checkWriter(ctx, tx, j, w); err != nil {
		return 0, err
	}
	return j.Attempt, nil
}

// cleanText makes a line storable as TEXT everywhere: a process may print
// invalid UTF-8 or NUL bytes, which PostgreSQL refuses.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

type logRow struct {
	Attempt int    `db:"attempt"`
	Seq     int64  `db:"seq"`
	At      int64  `db:"at"`
	Stream  int    `db:"stream"`
	Text    string `db:"text"`
}

// ListLogs returns up to limit lines of job jobID ordered by (attempt,
// seq), strictly after (afterAttempt, afterSeq); (0, 0) starts at the
// beginning. limit <= 0 means 1000; at most 10000 lines come back.
func (s *Store) ListLogs(ctx context.Context, jobID string, afterAttempt int, afterSeq int64, limit int) ([]LogLine, error) {
	if limit <= 0 {
		limit = 1000
	}
	limit = min(limit, 10000)
	var rows []logRow
	err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT attempt, seq, at, stream, text FROM job_logs
		WHERE job_id = ? AND (attempt > ? OR (attempt = ? AND seq > ?)) ORDER BY attempt, seq LIMIT `+strconv.Itoa(limit)),
		jobID, afterAttempt, afterAttempt, afterSeq) // a bound LIMIT makes SQLite compile twice
	if err != nil {
		return nil, fmt.Errorf("list logs of job %s: %w", jobID, err)
	}
	if len(rows) == 0 {
		// Tell "no lines yet" from "no such job".
		if _, err := s.GetJob(ctx, jobID); err != nil {
			var e *errs.Error
			if errors.As(err, &e) {
				return nil, e
			}
			return nil, fmt.Errorf("list logs of job %s: %w", jobID, err)
		}
		return nil, nil
	}
	out := make([]LogLine, len(rows))
	for i, r := range rows {
		out[i] = LogLine{Attempt: r.Attempt, Seq: r.Seq, Time: fromNanos(r.At), Stream: r.Stream, Text: r.Text}
	}
	return out, nil
}
