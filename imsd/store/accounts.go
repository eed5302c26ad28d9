package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
	"github.com/byoc-dev/byoc/internal/labels"
	"github.com/byoc-dev/byoc/schema/app/diag"
)

// CreateAPIToken stores an operator token. hash is the SHA-256 of its
// secret. A name may be reused only once its token is revoked.
func (s *Store) CreateAPIToken(ctx context.Context, t APIToken, hash string) error {
	switch {
	case t.ID == "":
		return errs.Field("id", "required")
	case t.Name == "":
		return errs.Field("name", "required")
	case !validRole(t.Role):
		return errs.Field("role", "must be %q, %q, %q or %q, not %q", RoleViewer, RoleOperator, RoleSupport, RoleAdmin, t.Role)
	case hash == "":
		return errs.Field("hash", "required")
	}
	return s.write(ctx, "create api token", func(tx *txn) error {
		var n int
		if err := tx.GetContext(ctx, &n, s.bind(`SELECT COUNT(*) FROM api_tokens WHERE name = ? AND revoked_at = 0`), t.Name); err != nil {
			return err
		}
		if n > 0 {
			return errs.E(errs.AlreadyExists, "an api token named %q exists; revoke it first or pick another name", t.Name)
		}
		_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO api_tokens (id, name, role, hash, created_at, scope, expires_at, created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
			t.ID, t.Name, string(t.Role), hash, nanos(t.CreatedAt), t.Scope, nanos(t.ExpiresAt), t.CreatedBy)
		if isUnique(err) {
			return errs.E(errs.AlreadyExists, "api token %q already exists", t.ID)
		}
		if err != nil {
			return err
		}
		data := map[string]string{"id": t.ID, "role": string(t.Role), "scope": t.Scope}
		if !t.ExpiresAt.IsZero() {
			data["expires_at"] = t.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorChain, At: t.CreatedAt, Kind: "token.created", Actor: t.CreatedBy, Subject: "token:" + t.Name, Data: data})
	})
}

func validRole(r Role) bool {
	return r == RoleAdmin || r == RoleViewer || r == RoleOperator || r == RoleSupport
}

type apiTokenRow struct {
	ID         string `db:"id"`
	Name       string `db:"name"`
	Role       string `db:"role"`
	CreatedAt  int64  `db:"created_at"`
	Scope      string `db:"scope"`
	ExpiresAt  int64  `db:"expires_at"`
	LastUsedAt int64  `db:"last_used_at"`
	CreatedBy  string `db:"created_by"`
}

func (r apiTokenRow) token() APIToken {
	return APIToken{ID: r.ID, Name: r.Name, Role: Role(r.Role), CreatedAt: fromNanos(r.CreatedAt), Scope: r.Scope,
		ExpiresAt: fromNanos(r.ExpiresAt), LastUsedAt: fromNanos(r.LastUsedAt), CreatedBy: r.CreatedBy}
}

const apiTokenCols = `id, name, role, created_at, scope, expires_at, last_used_at, created_by`

// APITokenByHash returns the unrevoked token whose secret hashes to hash
// (expired or not: the caller says which).
func (s *Store) APITokenByHash(ctx context.Context, hash string) (APIToken, error) {
	var r apiTokenRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+apiTokenCols+` FROM api_tokens WHERE hash = ? AND revoked_at = 0`), hash)
	if errors.Is(err, sql.ErrNoRows) {
		return APIToken{}, errs.E(errs.NotFound, "api token not found")
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("api token by hash: %w", err)
	}
	return r.token(), nil
}

// ListAPITokens returns the unrevoked tokens by name.
func (s *Store) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	var rows []apiTokenRow
	if err := s.r.SelectContext(ctx, &rows, `SELECT `+apiTokenCols+` FROM api_tokens WHERE revoked_at = 0 ORDER BY name, id`); err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	out := make([]APIToken, len(rows))
	for i, r := range rows {
		out[i] = r.token()
	}
	return out, nil
}

// RevokeAPIToken revokes the unrevoked token with id or name idOrName,
// recording by whom, and returns it.
func (s *Store) RevokeAPIToken(ctx context.Context, idOrName, by string, at time.Time) (APIToken, error) {
	var tok APIToken
	err := s.write(ctx, "revoke api token", func(tx *txn) error {
		var rows []apiTokenRow
		if err := tx.SelectContext(ctx, &rows, s.bind(`SELECT `+apiTokenCols+` FROM api_tokens WHERE (id = ? OR name = ?) AND revoked_at = 0`), idOrName, idOrName); err != nil {
			return err
		}
		if len(rows) == 0 {
			return errs.E(errs.NotFound, "no unrevoked api token with id or name %q (byoc token list)", idOrName)
		}
		tok = rows[0].token()
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE api_tokens SET revoked_at = ? WHERE id = ?`), nanos(at), tok.ID); err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorChain, At: at, Kind: "token.revoked", Actor: by, Subject: "token:" + tok.Name,
			Data: map[string]string{"id": tok.ID, "role": string(tok.Role), "scope": tok.Scope}})
	})
	return tok, err
}

// TouchAPIToken records that the token was used at at.
func (s *Store) TouchAPIToken(ctx context.Context, id string, at time.Time) error {
	return s.write(ctx, "touch api token", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`UPDATE api_tokens SET last_used_at = ? WHERE id = ? AND last_used_at < ?`), nanos(at), id, nanos(at))
		return err
	})
}

// CountAPITokens returns how many unrevoked operator tokens exist, so imsd
// can tell a first start (mint an admin token) from a later one.
func (s *Store) CountAPITokens(ctx context.Context) (int, error) {
	var n int
	if err := s.r.GetContext(ctx, &n, `SELECT COUNT(*) FROM api_tokens WHERE revoked_at = 0`); err != nil {
		return 0, fmt.Errorf("count api tokens: %w", err)
	}
	return n, nil
}

type appRow struct {
	ID          string `db:"id"`
	Name        string `db:"name"`
	Description string `db:"description"`
	CreatedAt   int64  `db:"created_at"`
}

func (r appRow) app() App {
	return App{ID: r.ID, Name: r.Name, Description: r.Description, CreatedAt: fromNanos(r.CreatedAt)}
}

// CreateApp stores a new app. Its ID and name must both be unused.
func (s *Store) CreateApp(ctx context.Context, a App) error {
	switch {
	case a.ID == "":
		return errs.Field("id", "required")
	case a.Name == "":
		return errs.Field("name", "required")
	}
	return s.write(ctx, "create app", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO apps (id, name, description, created_at) VALUES (?, ?, ?, ?)`),
			a.ID, a.Name, a.Description, nanos(a.CreatedAt))
		if isUnique(err) {
			return errs.E(errs.AlreadyExists, "app %q already exists", a.Name)
		}
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorChain, At: a.CreatedAt, Kind: "app.created", Subject: "app:" + a.Name,
			Data: map[string]string{"id": a.ID}})
	})
}

// ListApps returns every app ordered by name.
func (s *Store) ListApps(ctx context.Context) ([]App, error) {
	var rows []appRow
	if err := s.r.SelectContext(ctx, &rows, `SELECT id, name, description, created_at FROM apps ORDER BY name`); err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	apps := make([]App, len(rows))
	for i, r := range rows {
		apps[i] = r.app()
	}
	return apps, nil
}

// GetApp returns the app with ID or name idOrName; an ID match wins.
func (s *Store) GetApp(ctx context.Context, idOrName string) (App, error) {
	var r appRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT id, name, description, created_at FROM apps
		WHERE id = ? OR name = ? ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1`), idOrName, idOrName, idOrName)
	if errors.Is(err, sql.ErrNoRows) {
		return App{}, errs.E(errs.NotFound, "app %q not found", idOrName)
	}
	if err != nil {
		return App{}, fmt.Errorf("get app %s: %w", idOrName, err)
	}
	return r.app(), nil
}

type installRow struct {
	ID          string `db:"id"`
	AppID       string `db:"app_id"`
	Name        string `db:"name"`
	Inputs      string `db:"inputs"`
	CreatedAt   int64  `db:"created_at"`
	State       string `db:"state"`
	AppRevision int64  `db:"app_revision"`
	Settings    string `db:"settings"`
	Health      string `db:"health"`
	HealthAt    int64  `db:"health_at"`
	HealthError string `db:"health_error"`
	HealthWF    string `db:"health_workflow_id"`
	Labels      string `db:"labels"`
}

const installCols = `id, app_id, name, inputs, created_at, state, app_revision, settings, health, health_at, health_error, health_workflow_id, labels`

func (r installRow) install() (Install, error) {
	in, err := decodeMap(r.Inputs)
	if err != nil {
		return Install{}, fmt.Errorf("install %s inputs: %w", r.ID, err)
	}
	var st InstallSettings
	if err := json.Unmarshal([]byte(r.Settings), &st); err != nil {
		return Install{}, fmt.Errorf("install %s settings: %w", r.ID, err)
	}
	lb, err := decodeMap(r.Labels)
	if err != nil {
		return Install{}, fmt.Errorf("install %s labels: %w", r.ID, err)
	}
	return Install{ID: r.ID, AppID: r.AppID, Name: r.Name, Inputs: in, Labels: lb, CreatedAt: fromNanos(r.CreatedAt),
		State: InstallState(r.State), AppRevision: r.AppRevision, Settings: st,
		Health: InstallHealth{State: HealthState(r.Health), At: fromNanos(r.HealthAt), Error: r.HealthError, WorkflowID: r.HealthWF}}, nil
}

func installs(rows []installRow) ([]Install, error) {
	out := make([]Install, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = r.install(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CreateInstall stores a new install of an existing app together with its
// first enrolment token, in one transaction. tok.InstallID may be empty; it
// is taken from in.
func (s *Store) CreateInstall(ctx context.Context, in Install, tok EnrollmentToken) error {
	switch {
	case in.ID == "":
		return errs.Field("id", "required")
	case in.Name == "":
		return errs.Field("name", "required")
	case in.AppID == "":
		return errs.Field("app_id", "required")
	case tok.InstallID != "" && tok.InstallID != in.ID:
		return errs.Field("enrollment_token.install_id", "is %q, want the new install %q", tok.InstallID, in.ID)
	}
	if err := labels.Validate(in.Labels); err != nil {
		return errs.Field("labels", "%v", err)
	}
	tok.InstallID = in.ID
	if err := validateEnrollmentToken(tok); err != nil {
		return err
	}
	return s.write(ctx, "create install", func(tx *txn) error {
		var one int
		err := tx.GetContext(ctx, &one, s.bind(`SELECT 1 FROM apps WHERE id = ?`), in.AppID)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "app %q not found", in.AppID)
		}
		if err != nil {
			return err
		}
		settings, err := json.Marshal(in.Settings)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO installs (id, app_id, name, inputs, created_at, settings, labels) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			in.ID, in.AppID, in.Name, encodeMap(in.Inputs), nanos(in.CreatedAt), string(settings), encodeMap(in.Labels))
		if isUnique(err) {
			return errs.E(errs.AlreadyExists, "install %q already exists", in.Name)
		}
		if err != nil {
			return err
		}
		if err := s.Audit(ctx, tx, AuditEvent{Chain: in.ID, At: in.CreatedAt, Kind: "install.created", Subject: "install:" + in.Name,
			Data: createdData(in)}); err != nil {
			return err
		}
		return s.insertEnrollmentToken(ctx, tx, tok)
	})
}

// ListInstalls returns the installs of app appID, or of every app when
// appID is "", ordered by name.
func (s *Store) ListInstalls(ctx context.Context, appID string) ([]Install, error) {
	var rows []installRow
	err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+installCols+` FROM installs
		WHERE ? = '' OR app_id = ? ORDER BY name`), appID, appID)
	if err != nil {
		return nil, fmt.Errorf("list installs: %w", err)
	}
	return installs(rows)
}

// GetInstall returns the install with ID or name idOrName; an ID match wins.
func (s *Store) GetInstall(ctx context.Context, idOrName string) (Install, error) {
	var r installRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+installCols+` FROM installs
		WHERE id = ? OR name = ? ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1`), idOrName, idOrName, idOrName)
	if errors.Is(err, sql.ErrNoRows) {
		return Install{}, errs.E(errs.NotFound, "install %q not found%s", idOrName, s.suggestInstall(ctx, idOrName))
	}
	if err != nil {
		return Install{}, fmt.Errorf("get install %s: %w", idOrName, err)
	}
	return r.install()
}

// suggestInstall is " (did you mean "acme"?)" when an install's name is
// close to the mistyped name, else "". It reads the names only on a miss.
func (s *Store) suggestInstall(ctx context.Context, name string) string {
	var names []string
	if err := s.r.SelectContext(ctx, &names, `SELECT name FROM installs`); err != nil {
		return ""
	}
	if sug := diag.DidYouMean(name, names); sug != "" {
		return " (" + sug + ")"
	}
	return ""
}

// InstallID returns the id of the install with id or name idOrName,
// resolved as GetInstall resolves it, from a cache after the first time:
// enqueueing a job needs only the id, and a read per enqueue was the
// largest read on the dispatch path.
func (s *Store) InstallID(ctx context.Context, idOrName string) (string, error) {
	if id, ok := s.installIDs.get(idOrName); ok {
		return id, nil
	}
	in, err := s.GetInstall(ctx, idOrName)
	if err != nil {
		return "", err
	}
	s.installIDs.put(idOrName, in.ID)
	return in.ID, nil
}

// idCache maps keys that never change meaning to ids: install names and
// ids to install ids, agent ids to their install's id. It is bounded: past
// maxCachedIDs entries it stops adding, and lookups go to the database.
type idCache struct {
	m sync.Map // string -> string
	n atomic.Int64
}

const maxCachedIDs = 1 << 17

func (c *idCache) get(k string) (string, bool) {
	v, ok := c.m.Load(k)
	if !ok {
		return "", false
	}
	return v.(string), true
}

func (c *idCache) put(k, id string) {
	if c.n.Load() >= maxCachedIDs {
		return
	}
	if _, loaded := c.m.LoadOrStore(k, id); !loaded {
		c.n.Add(1)
	}
}

func validateEnrollmentToken(t EnrollmentToken) error {
	switch {
	case t.Hash == "":
		return errs.Field("enrollment_token.hash", "required")
	case t.InstallID == "":
		return errs.Field("enrollment_token.install_id", "required")
	}
	return requireTime("enrollment_token.expires_at", t.ExpiresAt)
}

// CreateEnrollmentToken stores another enrolment token for an existing
// install.
func (s *Store) CreateEnrollmentToken(ctx context.Context, t EnrollmentToken) error {
	if err := validateEnrollmentToken(t); err != nil {
		return err
	}
	return s.write(ctx, "create enrollment token", func(tx *txn) error {
		if err := s.insertEnrollmentToken(ctx, tx, t); err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: t.InstallID, At: t.CreatedAt, Kind: "enrollment_token.created", Subject: "install:" + t.InstallID,
			Data: map[string]string{"expires_at": t.ExpiresAt.UTC().Format(time.RFC3339)}})
	})
}

func (s *Store) insertEnrollmentToken(ctx context.Context, tx *txn, t EnrollmentToken) error {
	_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO enrollment_tokens (hash, install_id, expires_at, created_at) VALUES (?, ?, ?, ?)`),
		t.Hash, t.InstallID, nanos(t.ExpiresAt), nanos(t.CreatedAt))
	switch {
	case isUnique(err):
		return errs.E(errs.AlreadyExists, "enrollment token already exists")
	case isForeignKey(err):
		return errs.E(errs.NotFound, "install %q not found", t.InstallID)
	}
	return err
}

// Enroll spends the enrolment token whose secret hashes to tokenHash and
// registers agent a for the token's install (a.InstallID is ignored). A
// token works once: of two concurrent calls with it, exactly one succeeds.
// An unknown, used or expired token is refused with PermissionDenied, and
// the message says which.
func (s *Store) Enroll(ctx context.Context, tokenHash string, a Agent, now time.Time) (Agent, error) {
	switch {
	case a.ID == "":
		return Agent{}, errs.Field("id", "required")
	case len(a.PublicKey) == 0:
		return Agent{}, errs.Field("public_key", "required")
	}
	if err := requireTime("now", now); err != nil {
		return Agent{}, err
	}
	if a.EnrolledAt.IsZero() {
		a.EnrolledAt = now
	}
	err := s.write(ctx, "enroll", func(tx *txn) error {
		// The conditional UPDATE is the single point of truth: on
		// PostgreSQL a concurrent spender blocks on the row lock, then
		// re-checks used_at and updates nothing.
		// A build agent's token is the vendor install's; an install
		// agent's never is.
		role := ` AND install_id <> '` + VendorInstallID + `'`
		if a.Build {
			role = ` AND install_id = '` + VendorInstallID + `'`
		}
		err := tx.GetContext(ctx, &a.InstallID, s.bind(`UPDATE enrollment_tokens SET used_at = ?, used_by_agent = ?
			WHERE hash = ? AND used_at = 0 AND expires_at > ?`+role+` RETURNING install_id`),
			nanos(now), a.ID, tokenHash, nanos(now))
		if errors.Is(err, sql.ErrNoRows) {
			return s.whyTokenRefused(ctx, tx, tokenHash, a.Build)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO agents (id, install_id, public_key, hostname, version, enrolled_at, last_seen_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`),
			a.ID, a.InstallID, a.PublicKey, a.Hostname, a.Version, nanos(a.EnrolledAt), nanos(a.LastSeenAt))
		if isUnique(err) {
			return errs.E(errs.AlreadyExists, "agent %q already exists", a.ID)
		}
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: a.InstallID, At: now, Kind: "agent.enrolled", Actor: "agent:" + a.ID, Subject: "agent:" + a.ID,
			Data: map[string]string{"hostname": a.Hostname, "version": a.Version, "public_key_sha256": fmt.Sprintf("%x", sha256.Sum256(a.PublicKey))}})
	})
	if err != nil {
		return Agent{}, err
	}
	a.EnrolledAt = fromNanos(nanos(a.EnrolledAt))
	a.LastSeenAt = fromNanos(nanos(a.LastSeenAt))
	return a, nil
}

func (s *Store) whyTokenRefused(ctx context.Context, tx *txn, hash string, build bool) error {
	var t struct {
		UsedAt    int64  `db:"used_at"`
		InstallID string `db:"install_id"`
	}
	err := tx.GetContext(ctx, &t, s.bind(`SELECT used_at, install_id FROM enrollment_tokens WHERE hash = ?`), hash)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return errs.E(errs.PermissionDenied, "enrollment token unknown")
	case err != nil:
		return err
	case build && t.InstallID != VendorInstallID:
		return errs.E(errs.PermissionDenied, "enrollment token is an install's; a build agent (--role build) needs a build agent token (byoc build agent-token)")
	case !build && t.InstallID == VendorInstallID:
		return errs.E(errs.PermissionDenied, "enrollment token is the build agent's; enrol with --role build")
	case t.UsedAt != 0:
		return errs.E(errs.PermissionDenied, "enrollment token already used")
	default:
		return errs.E(errs.PermissionDenied, "enrollment token expired")
	}
}

type agentRow struct {
	ID         string `db:"id"`
	InstallID  string `db:"install_id"`
	PublicKey  []byte `db:"public_key"`
	Hostname   string `db:"hostname"`
	Version    string `db:"version"`
	EnrolledAt int64  `db:"enrolled_at"`
	LastSeenAt int64  `db:"last_seen_at"`
	ConflictAt int64  `db:"conflict_at"`
	Conflict   string `db:"conflict"`
	// Permissions is JSON, "" for never reported.
	Permissions   string `db:"permissions"`
	PermissionsAt int64  `db:"permissions_at"`
	// Stack is JSON, "" for never reported.
	Stack          string `db:"stack"`
	Health         string `db:"health"`
	HealthSince    int64  `db:"health_since"`
	HealthReason   string `db:"health_reason"`
	ConnectedAt    int64  `db:"connected_at"`
	DisconnectedAt int64  `db:"disconnected_at"`
	AgentCondition string `db:"agent_condition"`
	AckedKeyID     string `db:"imsd_key_id"`
	AckedKeyAt     int64  `db:"imsd_key_acked_at"`
	RevokedAt      int64  `db:"revoked_at"`
	RevokedReason  string `db:"revoked_reason"`
	NextPublicKey  []byte `db:"next_public_key"`
	KeyRotatedAt   int64  `db:"key_rotated_at"`
	// UpdateReport and UpdateOffer are JSON, "" for none.
	UpdateReport string `db:"update_report"`
	UpdateOffer  string `db:"update_offer"`
	// PluginReport is JSON, "" for never reported.
	PluginReport string `db:"plugin_report"`
}

func (r agentRow) agent() Agent {
	a := Agent{
		ID: r.ID, InstallID: r.InstallID, PublicKey: r.PublicKey, Hostname: r.Hostname, Version: r.Version,
		EnrolledAt: fromNanos(r.EnrolledAt), LastSeenAt: fromNanos(r.LastSeenAt),
		ConflictAt: fromNanos(r.ConflictAt), Conflict: r.Conflict, PermissionsAt: fromNanos(r.PermissionsAt),
		Health: Health(r.Health), HealthSince: fromNanos(r.HealthSince), HealthReason: r.HealthReason,
		ConnectedAt: fromNanos(r.ConnectedAt), DisconnectedAt: fromNanos(r.DisconnectedAt), Condition: decodeCondition(r.AgentCondition),
		AckedKeyID: r.AckedKeyID, AckedKeyAt: fromNanos(r.AckedKeyAt),
		RevokedAt: fromNanos(r.RevokedAt), RevokedReason: r.RevokedReason,
		KeyRotatedAt: fromNanos(r.KeyRotatedAt),
	}
	if len(r.NextPublicKey) > 0 {
		a.NextPublicKey = r.NextPublicKey
	}
	if r.Permissions != "" {
		var p Permissions
		// imsd wrote it; an unreadable one shows as never reported.
		if json.Unmarshal([]byte(r.Permissions), &p) == nil {
			a.Permissions = &p
		}
	}
	if r.UpdateReport != "" {
		var u AgentUpdate
		if json.Unmarshal([]byte(r.UpdateReport), &u) == nil {
			a.Update = &u
		}
	}
	if r.UpdateOffer != "" {
		var o UpdateOffer
		if json.Unmarshal([]byte(r.UpdateOffer), &o) == nil {
			a.UpdateOffer = &o
		}
	}
	if r.PluginReport != "" {
		var p PluginReport
		if json.Unmarshal([]byte(r.PluginReport), &p) == nil {
			a.Plugins = &p
		}
	}
	if r.Stack != "" {
		var st StackReport
		if json.Unmarshal([]byte(r.Stack), &st) == nil {
			a.Stack = &st
		}
	}
	return a
}

const agentCols = `id, install_id, public_key, hostname, version, enrolled_at, last_seen_at, conflict_at, conflict,
	permissions, permissions_at, stack, health, health_since, health_reason, connected_at, disconnected_at, agent_condition,
	imsd_key_id, imsd_key_acked_at, revoked_at, revoked_reason, next_public_key, key_rotated_at, update_report, update_offer, plugin_report`

// SetAgentPermissions records the permission state agent id reported at
// now. imsd calls it when the state differs from what it last recorded.
func (s *Store) SetAgentPermissions(ctx context.Context, id string, p Permissions, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.updateAgent(ctx, "record agent permissions", id, func(tx *txn) error {
		return s.auditAgent(ctx, tx, id, "agent.permissions_changed", now, map[string]string{"permissions": string(b)})
	}, `UPDATE agents SET permissions = ?, permissions_at = ? WHERE id = ?`, string(b), nanos(now))
}

// SetAgentStack records what agent id reported of its install stack at
// now. imsd calls it when the report differs from what it last recorded.
func (s *Store) SetAgentStack(ctx context.Context, id string, r StackReport, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	r.ReportedAt = now.UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.updateAgent(ctx, "record agent stack", id, func(tx *txn) error {
		return s.auditAgent(ctx, tx, id, "agent.stack_reported", now, map[string]string{"stack": string(b)})
	}, `UPDATE agents SET stack = ? WHERE id = ?`, string(b))
}

// SetAgentUpdate records the update policy and latest update decision
// agent id reported at now. imsd calls it when the report differs from
// what it last recorded; a new decision is audited.
func (s *Store) SetAgentUpdate(ctx context.Context, id string, u AgentUpdate, decided bool, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	u.ReportedAt = now.UTC()
	b, err := json.Marshal(u)
	if err != nil {
		return err
	}
	return s.updateAgent(ctx, "record agent update report", id, func(tx *txn) error {
		if !decided || u.LastKind == "" {
			return nil
		}
		data := map[string]string{"release": u.LastRelease, "offer": u.LastOfferID, "version": u.LastVersion, "reason": u.LastReason}
		if u.LastCause != "" {
			data["cause"] = u.LastCause
		}
		return s.auditAgent(ctx, tx, id, "agent.update_"+u.LastKind, now, data)
	}, `UPDATE agents SET update_report = ? WHERE id = ?`, string(b))
}

// SetAgentPlugins records the plugin releases agent id reported pinned
// at now. imsd calls it when the report differs from what it last
// recorded. A release checked since the last report (a verdict, or a
// check time, it did not have) goes into the install's verification
// history.
func (s *Store) SetAgentPlugins(ctx context.Context, id string, r PluginReport, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	r.ReportedAt = now.UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.write(ctx, "record agent plugin releases", func(tx *txn) error {
		var cur struct {
			InstallID    string `db:"install_id"`
			PluginReport string `db:"plugin_report"`
		}
		if err := tx.GetContext(ctx, &cur, s.bind(`SELECT install_id, plugin_report FROM agents WHERE id = ?`), id); errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "agent %q not found", id)
		} else if err != nil {
			return err
		}
		var old PluginReport
		if cur.PluginReport != "" {
			_ = json.Unmarshal([]byte(cur.PluginReport), &old) // imsd wrote it; unreadable: none
		}
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET plugin_report = ? WHERE id = ?`), string(b), id); err != nil {
			return err
		}
		for _, p := range r.Releases {
			if p.Verdict == "" || slices.ContainsFunc(old.Releases, func(o PluginRelease) bool {
				return o.Type == p.Type && o.Release == p.Release && o.Verdict == p.Verdict && o.CheckedAt.Equal(p.CheckedAt)
			}) {
				continue
			}
			_, digest, _ := strings.Cut(p.Release, "@")
			var failed []string
			if p.Reason != "" {
				failed = []string{p.Reason}
			}
			at := p.CheckedAt
			if at.IsZero() {
				at = now.UTC()
			}
			if err := s.addVerificationHistory(ctx, tx, cur.InstallID, VerificationRecord{ComponentType: p.Type, AgentID: id, Version: p.Version,
				ArtifactVerification: ArtifactVerification{Artifact: p.Release, Digest: digest, KeyID: p.KeyID, Verdict: p.Verdict,
					Failed: failed, VerifiedAt: at}}); err != nil {
				return err
			}
			if err := s.auditPluginCheck(ctx, tx, cur.InstallID, id, p, old, digest, at); err != nil {
				return err
			}
		}
		return nil
	})
}

// Audit kinds of the plugin releases an agent reports: a release it
// refused, and one it installed after refusing it.
const (
	KindAgentPluginRefused  = "agent.plugin_refused"
	KindAgentPluginVerified = "agent.plugin_verified"
)

// auditPluginCheck records in the install's chain a plugin release agent
// agentID newly reported refused, or verified when its last report had
// that release refused, with the data a job's artifact verification
// adds to the job's record (supply_chain, supply_chain_artifact,
// supply_chain_failed: rule "release" and the agent's reason).
func (s *Store) auditPluginCheck(ctx context.Context, tx *txn, install, agentID string, p PluginRelease, old PluginReport, digest string, at time.Time) error {
	kind := KindAgentPluginRefused
	data := map[string]string{"component_type": p.Type, "version": p.Version, "supply_chain": p.Verdict,
		"supply_chain_artifact": truncate(p.Release+" "+digest, 512)}
	switch {
	case p.Verdict == "refused":
		data["supply_chain_failed"] = truncate("release: "+p.Reason, 512)
	case p.Verdict == "verified" && slices.ContainsFunc(old.Releases, func(o PluginRelease) bool {
		return o.Type == p.Type && o.Release == p.Release && o.Verdict == "refused"
	}):
		kind, data["key_id"] = KindAgentPluginVerified, p.KeyID
	default:
		return nil
	}
	return s.Audit(ctx, tx, AuditEvent{Chain: install, At: at, Kind: kind, Actor: "agent:" + agentID, Subject: "plugin:" + p.Type, Data: data})
}

// OfferAgentUpdate records the agent release offer o for every agent of
// install installID not revoked, audited as agent.update_offered with
// actor as its actor, and returns their ids.
func (s *Store) OfferAgentUpdate(ctx context.Context, installID string, o UpdateOffer, actor string) ([]string, error) {
	if err := requireTime("offer time", o.OfferedAt); err != nil {
		return nil, err
	}
	o.OfferedBy = actor
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var ids []string
	err = s.write(ctx, "offer agent update", func(tx *txn) error {
		var err error
		ids, err = s.offerAgentUpdate(ctx, tx, installID, o, string(b), actor)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// offerAgentUpdate records offer o (b, as JSON) for the agents of
// installID not revoked, in tx, each audited as agent.update_offered.
func (s *Store) offerAgentUpdate(ctx context.Context, tx *txn, installID string, o UpdateOffer, b, actor string) ([]string, error) {
	var ids []string
	if err := tx.SelectContext(ctx, &ids, s.bind(`SELECT id FROM agents WHERE install_id = ? AND revoked_at = 0 ORDER BY id`), installID); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errs.E(errs.NotFound, "install %s has no agent that is not revoked", installID)
	}
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET update_offer = ? WHERE id = ?`), b, id); err != nil {
			return nil, err
		}
		if err := s.Audit(ctx, tx, AuditEvent{Chain: installID, At: o.OfferedAt, Kind: "agent.update_offered", Actor: actor, Subject: "agent:" + id,
			Data: map[string]string{"release": o.Release, "offer": o.ID}}); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// GetAgent returns the agent with ID id.
func (s *Store) GetAgent(ctx context.Context, id string) (Agent, error) {
	var r agentRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+agentCols+` FROM agents WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return Agent{}, errs.E(errs.NotFound, "agent %q not found", id)
	}
	if err != nil {
		return Agent{}, fmt.Errorf("get agent %s: %w", id, err)
	}
	return r.agent(), nil
}

// AgentsForInstall returns the agents enrolled for an install, newest first.
func (s *Store) AgentsForInstall(ctx context.Context, installID string) ([]Agent, error) {
	var rows []agentRow
	err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+agentCols+` FROM agents WHERE install_id = ?
		ORDER BY enrolled_at DESC, id DESC`), installID)
	if err != nil {
		return nil, fmt.Errorf("agents for install %s: %w", installID, err)
	}
	out := make([]Agent, len(rows))
	for i, r := range rows {
		out[i] = r.agent()
	}
	return out, nil
}

// RecordAgentConflict records that two processes were seen sharing agent
// id's identity at now, and what was seen.
func (s *Store) RecordAgentConflict(ctx context.Context, id, detail string, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.updateAgent(ctx, "record agent conflict", id, func(tx *txn) error {
		return s.auditAgent(ctx, tx, id, "agent.identity_conflict", now, map[string]string{"detail": truncate(detail, 512)})
	}, `UPDATE agents SET conflict_at = ?, conflict = ? WHERE id = ?`, nanos(now), detail)
}

// TouchAgent records that agent id was seen at now. It returns a
// PermissionDenied error once the agent is revoked (the time is still
// recorded): a replica holding the stream of an agent another replica
// revoked learns of it here, at the latest.
func (s *Store) TouchAgent(ctx context.Context, id string, now time.Time) error {
	return s.writeOne(ctx, "touch agent", func(tx *txn) error {
		// Never backwards: a closing stream records its last message
		// after the agent's next stream may have touched it later.
		var revokedAt int64
		err := tx.GetContext(ctx, &revokedAt, s.bind(`UPDATE agents SET last_seen_at = CASE
			WHEN last_seen_at IS NULL OR last_seen_at < ? THEN ? ELSE last_seen_at END WHERE id = ? RETURNING revoked_at`),
			nanos(now), nanos(now), id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errs.E(errs.NotFound, "agent %q not found", id)
		case err != nil:
			return err
		case revokedAt != 0:
			return errs.E(errs.PermissionDenied, "agent %q was revoked", id)
		}
		return nil
	})
}

// SetAgentNextKey records next as the next key of agent id, whose current
// key is cur, announced in a hello its current key authenticated (agentd
// identity rotate), at now: imsd accepts either key until the agent's
// first hello under next (PromoteAgentKey). Audited
// agent.key_rotation_started with the key ids given (ids as the caller
// names keys) and the endorsement. Nothing is written when next is the
// next key already, or when cur is no longer the agent's key.
func (s *Store) SetAgentNextKey(ctx context.Context, id string, cur, next []byte, curID, nextID, endorsement string, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.writeOne(ctx, "record the agent's next key", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET next_public_key = ? WHERE id = ? AND public_key = ? AND next_public_key <> ?`),
			next, id, cur, next)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		return s.auditAgent(ctx, tx, id, "agent.key_rotation_started", now, map[string]string{"key_id": curID, "next_key_id": nextID, "endorsement": endorsement})
	})
}

// PromoteAgentKey makes next, the next key of agent id (SetAgentNextKey),
// its key at now, after a hello under it: from then on the old key is
// refused. Audited agent.key_rotated. It reports whether it promoted
// (false: next is not the agent's next key, say another replica promoted
// it first).
func (s *Store) PromoteAgentKey(ctx context.Context, id string, next []byte, prevID, nextID string, now time.Time) (bool, error) {
	if err := requireTime("now", now); err != nil {
		return false, err
	}
	var done bool
	err := s.writeOne(ctx, "promote the agent's next key", func(tx *txn) error {
		done = false
		empty := `x''`
		if s.postgres() {
			empty = `''::bytea`
		}
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET public_key = next_public_key, next_public_key = `+empty+`, key_rotated_at = ?
			WHERE id = ? AND next_public_key = ?`), nanos(now), id, next)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		done = true
		return s.auditAgent(ctx, tx, id, "agent.key_rotated", now, map[string]string{"previous_key_id": prevID, "key_id": nextID})
	})
	return done, err
}

// updateAgent runs one UPDATE of agent id's row (the query ends in
// "WHERE id = ?", args bind the rest) as a write of its own, then then
// (if not nil) in the same transaction, such as its audit event.
func (s *Store) updateAgent(ctx context.Context, op, id string, then func(*txn) error, q string, args ...any) error {
	return s.writeOne(ctx, op, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(q), append(args, id)...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.E(errs.NotFound, "agent %q not found", id)
		}
		if then != nil {
			return then(tx)
		}
		return nil
	})
}

func createdData(in Install) map[string]string {
	d := map[string]string{"app_id": in.AppID, "inputs": strings.Join(slices.Sorted(maps.Keys(in.Inputs)), ",")}
	if len(in.Labels) > 0 {
		d["labels"] = labels.Format(in.Labels)
	}
	return d
}

// SetInstallLabels replaces the labels of install id (an id, not a name)
// with lbls, each key and value checked as Kubernetes checks them, and
// records install.labeled (the labels before and after) with actor. An
// unchanged set changes nothing and records nothing.
func (s *Store) SetInstallLabels(ctx context.Context, id string, lbls map[string]string, actor string, now time.Time) (Install, error) {
	if err := labels.Validate(lbls); err != nil {
		return Install{}, errs.Field("labels", "%v", err)
	}
	var out Install
	err := s.write(ctx, "set install labels", func(tx *txn) error {
		var before string
		err := tx.GetContext(ctx, &before, s.bind(`SELECT labels FROM installs WHERE id = ?`), id)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.E(errs.NotFound, "install %q not found", id)
		}
		if err != nil {
			return err
		}
		var r installRow
		if err := tx.GetContext(ctx, &r, s.bind(`UPDATE installs SET labels = ? WHERE id = ? RETURNING `+installCols), encodeMap(lbls), id); err != nil {
			return err
		}
		if out, err = r.install(); err != nil {
			return err
		}
		if before == r.Labels {
			return nil
		}
		old, err := decodeMap(before)
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: out.ID, At: now, Kind: "install.labeled", Actor: actor, Subject: "install:" + out.Name,
			Data: map[string]string{"before": labels.Format(old), "after": labels.Format(lbls)}})
	})
	return out, err
}
