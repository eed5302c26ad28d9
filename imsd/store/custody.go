package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// The vendor's build agent belongs to a reserved install, so that build
// jobs are jobs like the others (leases, signatures, logs, audit). It is
// created with the first build agent token; its name starts with an
// underscore, which install and app names may not.
const (
	VendorInstallID   = "vendor"
	VendorInstallName = "_vendor"
	VendorAppID       = "vendor"
	vendorAppName     = "_vendor"
	// BuildType is the component type of build jobs (agentd's built-in,
	// served only by the build agent).
	BuildType = "build"
)

// CreateBuildAgentToken stores an enrolment token for the vendor's build
// agent, creating the reserved vendor app and install first if needed.
func (s *Store) CreateBuildAgentToken(ctx context.Context, t EnrollmentToken) error {
	t.InstallID = VendorInstallID
	if err := validateEnrollmentToken(t); err != nil {
		return err
	}
	return s.write(ctx, "create build agent token", func(tx *txn) error {
		var n int
		if err := tx.GetContext(ctx, &n, s.bind(`SELECT COUNT(*) FROM installs WHERE id = ?`), VendorInstallID); err != nil {
			return err
		}
		if n == 0 {
			if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO apps (id, name, description, created_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (id) DO NOTHING`), VendorAppID, vendorAppName, "the vendor's build agent (reserved)", nanos(t.CreatedAt)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO installs (id, app_id, name, inputs, created_at) VALUES (?, ?, ?, '{}', ?)`),
				VendorInstallID, VendorAppID, VendorInstallName, nanos(t.CreatedAt)); err != nil {
				return err
			}
			if err := s.Audit(ctx, tx, AuditEvent{Chain: VendorInstallID, At: t.CreatedAt, Kind: "install.created", Subject: "install:" + VendorInstallName,
				Data: map[string]string{"app_id": VendorAppID, "role": "build"}}); err != nil {
				return err
			}
		}
		if err := s.insertEnrollmentToken(ctx, tx, t); err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorInstallID, At: t.CreatedAt, Kind: "enrollment_token.created", Subject: "install:" + VendorInstallName,
			Data: map[string]string{"expires_at": t.ExpiresAt.UTC().Format(time.RFC3339), "role": "build"}})
	})
}

// Build is an artifact in the vendor registry, with its lineage.
type Build struct {
	ID           string
	Repository   string
	Digest       string
	Size         int64
	MediaType    string
	Kind         string
	Source       string
	SourceDigest string
	CreatedAt    time.Time
}

type buildRow struct {
	ID           string `db:"id"`
	Repository   string `db:"repository"`
	Digest       string `db:"digest"`
	Size         int64  `db:"size"`
	MediaType    string `db:"media_type"`
	Kind         string `db:"kind"`
	Source       string `db:"source"`
	SourceDigest string `db:"source_digest"`
	CreatedAt    int64  `db:"created_at"`
}

func (r buildRow) build() Build {
	return Build{ID: r.ID, Repository: r.Repository, Digest: r.Digest, Size: r.Size, MediaType: r.MediaType, Kind: r.Kind,
		Source: r.Source, SourceDigest: r.SourceDigest, CreatedAt: fromNanos(r.CreatedAt)}
}

const buildCols = `id, repository, digest, size, media_type, kind, source, source_digest, created_at`

// Build outputs: what a build job's agent reports, from which imsd
// records the build.
const (
	BuildOutRepository   = "repository"
	BuildOutDigest       = "digest"
	BuildOutSize         = "size"
	BuildOutMediaType    = "media_type"
	BuildOutKind         = "kind"
	BuildOutSource       = "source"
	BuildOutSourceDigest = "source_digest"
)

// BuildFromOutputs reads the build a build job's outputs report.
func BuildFromOutputs(jobID string, out map[string]string, now time.Time) (Build, error) {
	b := Build{ID: jobID, Repository: out[BuildOutRepository], Digest: out[BuildOutDigest], MediaType: out[BuildOutMediaType],
		Kind: out[BuildOutKind], Source: out[BuildOutSource], SourceDigest: out[BuildOutSourceDigest], CreatedAt: now}
	for k, v := range map[string]string{BuildOutRepository: b.Repository, BuildOutDigest: b.Digest, BuildOutKind: b.Kind, BuildOutSource: b.Source} {
		if v == "" {
			return Build{}, errs.Field("outputs."+k, "required for a build")
		}
	}
	if !strings.HasPrefix(b.Digest, "sha256:") || len(b.Digest) != 71 {
		return Build{}, errs.Field("outputs.digest", "%q is not a sha256 digest", b.Digest)
	}
	if v := out[BuildOutSize]; v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return Build{}, errs.Field("outputs.size", "%q is not a size", v)
		}
		b.Size = n
	}
	return b, nil
}

// recordBuild inserts the build a succeeded build job reported, in the
// job's finishing transaction, with its audit event in the vendor chain.
func (s *Store) recordBuild(ctx context.Context, tx *txn, b Build) error {
	_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO builds (`+buildCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`), b.ID, b.Repository, b.Digest, b.Size, b.MediaType, b.Kind, b.Source, b.SourceDigest, nanos(b.CreatedAt))
	if err != nil {
		return fmt.Errorf("record build: %w", err)
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: VendorInstallID, At: b.CreatedAt, Kind: "build.recorded", Subject: "build:" + b.ID,
		Data: map[string]string{"repository": b.Repository, "digest": b.Digest, "source": b.Source, "source_digest": b.SourceDigest}})
}

// ListBuilds returns builds, newest first, of repository (all when "").
func (s *Store) ListBuilds(ctx context.Context, repository string, limit int) ([]Build, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	var rows []buildRow
	if err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+buildCols+` FROM builds WHERE ? = '' OR repository = ?
		ORDER BY created_at DESC, id DESC LIMIT `+strconv.Itoa(limit)), repository, repository); err != nil {
		return nil, fmt.Errorf("list builds: %w", err)
	}
	out := make([]Build, len(rows))
	for i, r := range rows {
		out[i] = r.build()
	}
	return out, nil
}

// BuildByDigest returns the newest build of digest in repository.
func (s *Store) BuildByDigest(ctx context.Context, repository, digest string) (Build, error) {
	var r buildRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+buildCols+` FROM builds WHERE repository = ? AND digest = ?
		ORDER BY created_at DESC LIMIT 1`), repository, digest)
	if errors.Is(err, sql.ErrNoRows) {
		return Build{}, errs.E(errs.NotFound, "no build of %s@%s", repository, digest)
	}
	if err != nil {
		return Build{}, fmt.Errorf("build %s@%s: %w", repository, digest, err)
	}
	return r.build(), nil
}

// RegistryGrant is a one-time grant to exchange for a registry token.
type RegistryGrant struct {
	ID string
	// Hash is the hash of the grant's secret (auth.HashSecret).
	Hash      string
	InstallID string
	JobID     string
	Attempt   int
	// Scopes are Docker token scopes (repository:NAME:ACTIONS).
	Scopes    []string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    time.Time
	UsedBy    string
}

// CreateRegistryGrant stores grant g, audited in its install's chain.
func (s *Store) CreateRegistryGrant(ctx context.Context, g RegistryGrant) error {
	switch {
	case g.ID == "" || g.Hash == "" || g.InstallID == "" || g.JobID == "":
		return errs.Field("grant", "id, hash, install and job are required")
	case len(g.Scopes) == 0:
		return errs.Field("grant.scopes", "required")
	}
	if err := requireTime("grant.expires_at", g.ExpiresAt); err != nil {
		return err
	}
	return s.write(ctx, "create registry grant", func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO registry_grants (id, hash, install_id, job_id, attempt, scopes, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), g.ID, g.Hash, g.InstallID, g.JobID, g.Attempt, strings.Join(g.Scopes, " "),
			nanos(g.CreatedAt), nanos(g.ExpiresAt)); err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: g.InstallID, At: g.CreatedAt, Kind: "registry.grant_issued", Actor: "imsd", Subject: "grant:" + g.ID,
			Data: map[string]string{"job_id": g.JobID, "attempt": strconv.Itoa(g.Attempt), "scopes": strings.Join(g.Scopes, " "),
				"expires_at": g.ExpiresAt.UTC().Format(time.RFC3339)}})
	})
}

type registryGrantRow struct {
	ID        string `db:"id"`
	Hash      string `db:"hash"`
	InstallID string `db:"install_id"`
	JobID     string `db:"job_id"`
	Attempt   int    `db:"attempt"`
	Scopes    string `db:"scopes"`
	CreatedAt int64  `db:"created_at"`
	ExpiresAt int64  `db:"expires_at"`
	UsedAt    int64  `db:"used_at"`
	UsedBy    string `db:"used_by"`
}

// ExchangeRegistryGrant spends grant id for agent agentID at now: the
// secret must hash to hash, the agent must belong to the grant's install,
// the grant must be unused and unexpired, and check (the caller's scope
// test) must pass. It records the exchange, or the refusal with its
// reason, in the install's audit chain (a refusal of an unknown grant in
// the agent's install's chain). A refusal is PermissionDenied, saying why.
func (s *Store) ExchangeRegistryGrant(ctx context.Context, id, hash, agentID string, now time.Time, check func(RegistryGrant) error) (RegistryGrant, error) {
	if err := requireTime("now", now); err != nil {
		return RegistryGrant{}, err
	}
	var g RegistryGrant
	var refusal *AuditEvent
	err := s.write(ctx, "exchange registry grant", func(tx *txn) error {
		var agentInstall string
		err := tx.GetContext(ctx, &agentInstall, s.bind(`SELECT install_id FROM agents WHERE id = ?`), agentID)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.PermissionDenied, "agent %q unknown", agentID)
		}
		if err != nil {
			return err
		}
		var r registryGrantRow
		err = tx.GetContext(ctx, &r, s.bind(`SELECT id, hash, install_id, job_id, attempt, scopes, created_at, expires_at, used_at, used_by
			FROM registry_grants WHERE id = ?`), id)
		refuse := func(chain, format string, args ...any) error {
			msg := fmt.Sprintf(format, args...)
			refusal = &AuditEvent{Chain: chain, At: now, Kind: "registry.grant_refused", Actor: "agent:" + agentID, Subject: "grant:" + id,
				Data: map[string]string{"reason": msg}}
			return errs.E(errs.PermissionDenied, "%s", msg)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return refuse(agentInstall, "grant %q unknown", id)
		}
		if err != nil {
			return err
		}
		g = RegistryGrant{ID: r.ID, Hash: r.Hash, InstallID: r.InstallID, JobID: r.JobID, Attempt: r.Attempt,
			Scopes: strings.Fields(r.Scopes), CreatedAt: fromNanos(r.CreatedAt), ExpiresAt: fromNanos(r.ExpiresAt),
			UsedAt: fromNanos(r.UsedAt), UsedBy: r.UsedBy}
		switch {
		case subtle.ConstantTimeCompare([]byte(hash), []byte(r.Hash)) != 1:
			return refuse(r.InstallID, "grant %s: the secret does not match", id)
		case agentInstall != r.InstallID:
			return refuse(r.InstallID, "grant %s belongs to another install than agent %s's", id, agentID)
		case r.UsedAt != 0:
			return refuse(r.InstallID, "grant %s was already exchanged at %s by %s; a grant is exchanged once", id,
				fromNanos(r.UsedAt).UTC().Format(time.RFC3339Nano), r.UsedBy)
		case r.ExpiresAt <= nanos(now):
			return refuse(r.InstallID, "grant %s expired at %s", id, fromNanos(r.ExpiresAt).UTC().Format(time.RFC3339))
		}
		if check != nil {
			if err := check(g); err != nil {
				return refuse(r.InstallID, "grant %s: %v", id, err)
			}
		}
		ok, err := s.tryExec(ctx, tx, `UPDATE registry_grants SET used_at = ?, used_by = ? WHERE id = ? AND used_at = 0`, nanos(now), agentID, id)
		if err != nil {
			return err
		}
		if !ok {
			return refuse(r.InstallID, "grant %s was already exchanged; a grant is exchanged once", id)
		}
		g.UsedAt, g.UsedBy = now, agentID
		return s.Audit(ctx, tx, AuditEvent{Chain: r.InstallID, At: now, Kind: "registry.grant_exchanged", Actor: "agent:" + agentID, Subject: "grant:" + id,
			Data: map[string]string{"job_id": r.JobID, "scopes": r.Scopes}})
	})
	if err != nil && refusal != nil {
		// The refusal's own record: the refused write rolled back.
		if aerr := s.RecordAudit(ctx, *refusal); aerr != nil {
			return RegistryGrant{}, fmt.Errorf("record refused grant exchange: %w", aerr)
		}
	}
	return g, err
}

// SweepRegistryGrants deletes grants that expired before cutoff.
func (s *Store) SweepRegistryGrants(ctx context.Context, cutoff time.Time) error {
	return s.write(ctx, "sweep registry grants", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`DELETE FROM registry_grants WHERE expires_at < ?`), nanos(cutoff))
		return err
	})
}

// IsVendor reports whether in is the vendor's build agent's reserved
// install, which is no customer's.
func (in Install) IsVendor() bool { return in.ID == VendorInstallID }

// IsVendor reports whether a is the vendor's build agent's reserved app.
func (a App) IsVendor() bool { return a.ID == VendorAppID }

// CustomerApps is apps without the vendor's reserved app: what app list
// shows unless asked for it.
func CustomerApps(apps []App) []App {
	return slices.DeleteFunc(apps, App.IsVendor)
}

// CustomerInstalls is ins without the vendor's reserved install: what
// install lists, the fleet view and release targeting work on.
func CustomerInstalls(ins []Install) []Install {
	return slices.DeleteFunc(ins, Install.IsVendor)
}
