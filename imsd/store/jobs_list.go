// Jobs, reads: one job (GetJob) and a filtered page of jobs (ListJobs)
// with its cursor.

package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// GetJob returns the job with ID id.
func (s *Store) GetJob(ctx context.Context, id string) (Job, error) {
	var r jobRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+jobCols+` FROM jobs WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, errs.E(errs.NotFound, "job %q not found", id)
	}
	if err != nil {
		return Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	return r.job()
}

// ListJobs returns the jobs f selects, newest first, and a cursor for the
// next page ("" on the last page).
func (s *Store) ListJobs(ctx context.Context, f JobFilter) (jobs []Job, nextCursor string, err error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, "", errs.Field("limit", "must be between 1 and 1000, got %d", limit)
	}
	var (
		where []string
		args  []any
	)
	if f.InstallID != "" {
		where = append(where, "install_id = ?")
		args = append(args, f.InstallID)
	}
	if f.InstallIDs != nil {
		if len(f.InstallIDs) == 0 {
			return nil, "", nil
		}
		where = append(where, "install_id IN ("+placeholders(len(f.InstallIDs))+")")
		for _, id := range f.InstallIDs {
			args = append(args, id)
		}
	}
	if len(f.States) > 0 {
		for i, st := range f.States {
			if !validState(st) {
				return nil, "", errs.Field(fmt.Sprintf("states[%d]", i), "unknown job state %q", st)
			}
			args = append(args, string(st))
		}
		where = append(where, s.phaseIs(f.States...)+"state IN ("+placeholders(len(f.States))+")")
	}
	if f.Cursor != "" {
		at, id, ok := parseCursor(f.Cursor)
		if !ok {
			return nil, "", errs.Field("cursor", "not a cursor from a previous page")
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, at, at, id)
	}
	q := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	// A bound LIMIT makes SQLite compile the query twice; limit is an int
	// (docs/performance-store.md, "Limits written into the SQL").
	q += ` ORDER BY created_at DESC, id DESC LIMIT ` + strconv.Itoa(limit+1)
	var rows []jobRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(q), args...); err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		nextCursor = makeCursor(last.CreatedAt, last.ID)
	}
	out, err := toJobs(rows)
	return out, nextCursor, err
}

func validState(s JobState) bool {
	switch s {
	case JobQueued, JobAssigned, JobRunning:
		return true
	}
	return s.Terminal()
}

// A cursor is the (created_at, id) of the last job of a page. It is
// base64 so clients treat it as opaque.
func makeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + "/" + id))
}

func parseCursor(c string) (at int64, id string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", false
	}
	a, id, ok := strings.Cut(string(b), "/")
	if !ok || id == "" {
		return 0, "", false
	}
	at, err = strconv.ParseInt(a, 10, 64)
	return at, id, err == nil
}
