package store

import (
	"context"
	"fmt"
)

// FleetStatus is what the fleet view needs about every install at once,
// read in a few statements rather than one per install.
type FleetStatus struct {
	Installs []Install
	// Agents holds each install's agents, newest first.
	Agents map[string][]Agent
	// Queued and Active count each install's queued and assigned-or-running jobs.
	Queued map[string]int
	Active map[string]int
}

// Fleet reads the status of every install (of one app when appID is set).
func (s *Store) Fleet(ctx context.Context, appID string) (FleetStatus, error) {
	ins, err := s.ListInstalls(ctx, appID)
	if err != nil {
		return FleetStatus{}, err
	}
	fs := FleetStatus{Installs: ins, Agents: map[string][]Agent{}, Queued: map[string]int{}, Active: map[string]int{}}
	var agents []agentRow
	if err := s.r.SelectContext(ctx, &agents, `SELECT `+agentCols+` FROM agents ORDER BY install_id, enrolled_at DESC, id DESC`); err != nil {
		return FleetStatus{}, fmt.Errorf("fleet agents: %w", err)
	}
	for _, r := range agents {
		fs.Agents[r.InstallID] = append(fs.Agents[r.InstallID], r.agent())
	}
	var counts []struct {
		InstallID string `db:"install_id"`
		State     string `db:"state"`
		N         int    `db:"n"`
	}
	// The states are written into the SQL, not bound: PostgreSQL uses
	// the partial index jobs_phase only when it can see that the query's
	// condition implies the index's, which a parameter hides from a
	// prepared statement's generic plan.
	err = s.r.SelectContext(ctx, &counts, `SELECT install_id, state, COUNT(*) AS n FROM jobs
		WHERE `+s.phaseIs(JobQueued, JobAssigned, JobRunning)+`state IN ('queued', 'assigned', 'running') GROUP BY install_id, state`)
	if err != nil {
		return FleetStatus{}, fmt.Errorf("fleet job counts: %w", err)
	}
	for _, c := range counts {
		if JobState(c.State) == JobQueued {
			fs.Queued[c.InstallID] += c.N
		} else {
			fs.Active[c.InstallID] += c.N
		}
	}
	return fs, nil
}

// ListLogsBefore returns up to limit lines of job jobID strictly before
// (beforeAttempt, beforeSeq), oldest first: the page just before a line,
// for reading a long log backwards. A beforeSeq of 0 means "before the
// end", so it returns the job's last limit lines. limit <= 0 means 500; at
// most 10000 lines come back.
func (s *Store) ListLogsBefore(ctx context.Context, jobID string, beforeAttempt int, beforeSeq int64, limit int) ([]LogLine, error) {
	if limit <= 0 {
		limit = 500
	}
	limit = min(limit, 10000)
	q := `SELECT attempt, seq, at, stream, text FROM job_logs WHERE job_id = ?`
	args := []any{jobID}
	if beforeSeq > 0 {
		q += ` AND (attempt < ? OR (attempt = ? AND seq < ?))`
		args = append(args, beforeAttempt, beforeAttempt, beforeSeq)
	}
	q += ` ORDER BY attempt DESC, seq DESC LIMIT ?`
	args = append(args, limit)
	var rows []logRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(q), args...); err != nil {
		return nil, fmt.Errorf("list logs of job %s: %w", jobID, err)
	}
	out := make([]LogLine, len(rows))
	for i, r := range rows {
		out[len(rows)-1-i] = LogLine{Attempt: r.Attempt, Seq: r.Seq, Time: fromNanos(r.At), Stream: r.Stream, Text: r.Text}
	}
	return out, nil
}
