package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// OpImport is the operation of an import job (byoc component import).
const OpImport = "import"

// ComponentImport is what an import job makes the install's component
// once it succeeds: what an apply records in InstallComponents, less the
// outputs, which the job returns.
type ComponentImport struct {
	JobID, InstallID, Name, ComponentType string
	// Digest is the digest of Config, the rendered config.
	Digest      string
	Config      []byte
	Needs       []string
	AppRevision int64
	// ImportID names the resource the job adopts.
	ImportID  string
	CreatedAt time.Time
}

// EnqueueImport stores an import job and what it makes the install's
// component, in one transaction; the caller gets the job to its agent
// (it is stored queued).
func (s *Store) EnqueueImport(ctx context.Context, j Job, imp ComponentImport) error {
	if j.Operation != OpImport || j.ID != imp.JobID || j.Component != imp.Name || j.InstallID != imp.InstallID {
		return errors.New("enqueue import: the job is not the import's")
	}
	config, err := checkNewJob(j)
	if err != nil {
		return err
	}
	return s.write(ctx, "enqueue import", func(tx *txn) error {
		if err := s.insertQueued(ctx, tx, j, config); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO component_imports (job_id, install_id, name, component_type, digest, config, needs, app_revision, import_id, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), imp.JobID, imp.InstallID, imp.Name, imp.ComponentType, imp.Digest, string(imp.Config),
			encodeList(imp.Needs), imp.AppRevision, imp.ImportID, nanos(imp.CreatedAt))
		return err
	})
}

// recordImport records the component a succeeded import job adopted as
// deployed, with the job's outputs, and audits it.
func (s *Store) recordImport(ctx context.Context, tx *txn, jobID string, r Result, now time.Time) error {
	var install, name, importID, createdBy string
	err := tx.QueryRowContext(ctx, s.bind(`SELECT i.install_id, i.name, i.import_id, j.created_by FROM component_imports i JOIN jobs j ON j.id = i.job_id
		WHERE i.job_id = ?`), jobID).Scan(&install, &name, &importID, &createdBy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // an import job enqueued otherwise records nothing
	}
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO install_components (`+installComponentCols+`)
		SELECT install_id, name, component_type, digest, config, ?, needs, app_revision, '', job_id, ? FROM component_imports WHERE job_id = ?
		ON CONFLICT (install_id, name) DO UPDATE SET component_type = excluded.component_type, digest = excluded.digest,
			config = excluded.config, outputs = excluded.outputs, needs = excluded.needs, app_revision = excluded.app_revision,
			workflow_id = excluded.workflow_id, job_id = excluded.job_id, deployed_at = excluded.deployed_at`),
		encodeMap(r.Outputs), nanos(now), jobID)
	if err != nil {
		return err
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: install, At: now, Kind: "component.imported", Actor: createdBy, Subject: "component:" + name,
		Data: map[string]string{"job": jobID, "import_id": truncate(importID, 512)}})
}
