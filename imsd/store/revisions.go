package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// AppRevision is an immutable snapshot of an app config: every file, as
// pushed, and the digest of their contents.
type AppRevision struct {
	AppID     string
	Number    int64
	Digest    string
	Version   string
	Files     map[string][]byte
	CreatedAt time.Time
	CreatedBy string
	// Warnings are what imsd's check of the files found worth saying
	// that let them through ("file:line: key: message"), in order.
	Warnings []string
}

type revisionRow struct {
	AppID     string `db:"app_id"`
	Number    int64  `db:"number"`
	Digest    string `db:"digest"`
	Version   string `db:"version"`
	Files     []byte `db:"files"`
	CreatedAt int64  `db:"created_at"`
	CreatedBy string `db:"created_by"`
	// Warnings is a JSON array, '' for none.
	Warnings string `db:"warnings"`
}

func (r revisionRow) revision(withFiles bool) (AppRevision, error) {
	rev := AppRevision{AppID: r.AppID, Number: r.Number, Digest: r.Digest, Version: r.Version,
		CreatedAt: fromNanos(r.CreatedAt), CreatedBy: r.CreatedBy}
	if r.Warnings != "" {
		if err := json.Unmarshal([]byte(r.Warnings), &rev.Warnings); err != nil {
			return AppRevision{}, fmt.Errorf("app %s revision %d warnings: %w", r.AppID, r.Number, err)
		}
	}
	if withFiles {
		if err := json.Unmarshal(r.Files, &rev.Files); err != nil {
			return AppRevision{}, fmt.Errorf("app %s revision %d files: %w", r.AppID, r.Number, err)
		}
	}
	return rev, nil
}

// CreateAppRevision stores rev as the app's next revision and returns it
// with its number. If the app's latest revision has the same digest,
// nothing is stored and that revision is returned with created false, so
// pushing the same config twice is harmless.
func (s *Store) CreateAppRevision(ctx context.Context, rev AppRevision) (out AppRevision, created bool, err error) {
	switch {
	case rev.AppID == "":
		return AppRevision{}, false, errs.Field("app_id", "required")
	case rev.Digest == "":
		return AppRevision{}, false, errs.Field("digest", "required")
	case len(rev.Files) == 0:
		return AppRevision{}, false, errs.Field("files", "required")
	}
	if err := requireTime("created_at", rev.CreatedAt); err != nil {
		return AppRevision{}, false, err
	}
	files, err := json.Marshal(rev.Files)
	if err != nil {
		return AppRevision{}, false, fmt.Errorf("create app revision: %w", err)
	}
	warnings := ""
	if len(rev.Warnings) > 0 {
		b, err := json.Marshal(rev.Warnings)
		if err != nil {
			return AppRevision{}, false, fmt.Errorf("create app revision: %w", err)
		}
		warnings = string(b)
	}
	err = s.write(ctx, "create app revision", func(tx *txn) error {
		// Lock the app row on PostgreSQL so concurrent pushes number
		// their revisions one after the other.
		var appID string
		err := tx.GetContext(ctx, &appID, s.bind(`SELECT id FROM apps WHERE id = ?`+s.forUpdate()), rev.AppID)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "app %q not found", rev.AppID)
		}
		if err != nil {
			return err
		}
		var last revisionRow
		err = tx.GetContext(ctx, &last, s.bind(`SELECT app_id, number, digest, version, created_at, created_by, warnings
			FROM app_revisions WHERE app_id = ? ORDER BY number DESC LIMIT 1`), rev.AppID)
		switch {
		case err == nil && last.Digest == rev.Digest:
			out, err = last.revision(false)
			out.Files = rev.Files
			return err
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return err
		}
		out = rev
		out.Number = last.Number + 1
		created = true
		_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO app_revisions (app_id, number, digest, version, files, created_at, created_by, warnings)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), rev.AppID, out.Number, rev.Digest, rev.Version, files, nanos(rev.CreatedAt), rev.CreatedBy, warnings)
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorChain, At: rev.CreatedAt, Kind: "app.pushed", Actor: rev.CreatedBy, Subject: "app:" + rev.AppID,
			Data: map[string]string{"revision": strconv.FormatInt(out.Number, 10), "digest": rev.Digest, "version": rev.Version}})
	})
	if err != nil {
		return AppRevision{}, false, err
	}
	return out, created, nil
}

// ListAppRevisions returns an app's revisions, newest first, without
// their files.
func (s *Store) ListAppRevisions(ctx context.Context, appID string) ([]AppRevision, error) {
	var rows []revisionRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT app_id, number, digest, version, created_at, created_by, warnings
		FROM app_revisions WHERE app_id = ? ORDER BY number DESC`), appID); err != nil {
		return nil, fmt.Errorf("list app revisions: %w", err)
	}
	out := make([]AppRevision, len(rows))
	for i, r := range rows {
		out[i], _ = r.revision(false)
	}
	return out, nil
}

// GetAppRevision returns revision number of an app with its files;
// number 0 means the latest.
func (s *Store) GetAppRevision(ctx context.Context, appID string, number int64) (AppRevision, error) {
	var r revisionRow
	var err error
	if number == 0 {
		err = s.r.GetContext(ctx, &r, s.bind(`SELECT app_id, number, digest, version, files, created_at, created_by, warnings
			FROM app_revisions WHERE app_id = ? ORDER BY number DESC LIMIT 1`), appID)
	} else {
		err = s.r.GetContext(ctx, &r, s.bind(`SELECT app_id, number, digest, version, files, created_at, created_by, warnings
			FROM app_revisions WHERE app_id = ? AND number = ?`), appID, number)
	}
	if errors.Is(err, sql.ErrNoRows) {
		if number == 0 {
			return AppRevision{}, errs.E(errs.NotFound, "app %s has no revisions yet", appID)
		}
		return AppRevision{}, errs.E(errs.NotFound, "app %s has no revision %d", appID, number)
	}
	if err != nil {
		return AppRevision{}, fmt.Errorf("get app revision: %w", err)
	}
	return r.revision(true)
}
