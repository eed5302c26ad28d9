package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// GrantState is where a break-glass request is. GrantExpired is never
// stored: it is how a pending request past its request expiry, or an
// approved grant past its expiry, reads (BreakGlassGrant.StateAt).
type GrantState string

// The grant states.
const (
	GrantPending  GrantState = "pending"
	GrantApproved GrantState = "approved"
	GrantDenied   GrantState = "denied"
	GrantExpired  GrantState = "expired"
	GrantRevoked  GrantState = "revoked"
)

// BreakGlassGrant is an operator's break-glass request and the customer's
// decision on it.
type BreakGlassGrant struct {
	ID               string
	InstallID        string
	Role             string
	RoleDescription  string
	Reason           string
	RequestedBy      string
	RequestedAt      time.Time
	Duration         time.Duration
	RequestExpiresAt time.Time
	State            GrantState
	DecidedBy        string
	DecidedAt        time.Time
	DecisionReason   string
	ExpiresAt        time.Time
	RevokedBy        string
	RevokedAt        time.Time
	// AgentID, Statement and Signature are the agent's signed decision
	// (approve or deny; a revocation keeps the approval's).
	AgentID   string
	Statement string
	Signature []byte
}

// StateAt is the grant's state at now: a stored pending or approved
// state past its time reads as expired.
func (g BreakGlassGrant) StateAt(now time.Time) GrantState {
	switch {
	case g.State == GrantPending && !now.Before(g.RequestExpiresAt):
		return GrantExpired
	case g.State == GrantApproved && !now.Before(g.ExpiresAt):
		return GrantExpired
	}
	return g.State
}

type grantRow struct {
	ID               string `db:"id"`
	InstallID        string `db:"install_id"`
	Role             string `db:"role"`
	RoleDescription  string `db:"role_description"`
	Reason           string `db:"reason"`
	RequestedBy      string `db:"requested_by"`
	RequestedAt      int64  `db:"requested_at"`
	DurationNS       int64  `db:"duration_ns"`
	RequestExpiresAt int64  `db:"request_expires_at"`
	State            string `db:"state"`
	DecidedBy        string `db:"decided_by"`
	DecidedAt        int64  `db:"decided_at"`
	DecisionReason   string `db:"decision_reason"`
	ExpiresAt        int64  `db:"expires_at"`
	RevokedBy        string `db:"revoked_by"`
	RevokedAt        int64  `db:"revoked_at"`
	AgentID          string `db:"agent_id"`
	Statement        string `db:"statement"`
	Signature        string `db:"signature"`
}

const grantCols = `id, install_id, role, role_description, reason, requested_by, requested_at, duration_ns,
	request_expires_at, state, decided_by, decided_at, decision_reason, expires_at, revoked_by, revoked_at,
	agent_id, statement, signature`

func (r grantRow) grant() BreakGlassGrant {
	sig, _ := base64.StdEncoding.DecodeString(r.Signature) // written by DecideBreakGlass only
	return BreakGlassGrant{ID: r.ID, InstallID: r.InstallID, Role: r.Role, RoleDescription: r.RoleDescription,
		Reason: r.Reason, RequestedBy: r.RequestedBy, RequestedAt: fromNanos(r.RequestedAt),
		Duration: time.Duration(r.DurationNS), RequestExpiresAt: fromNanos(r.RequestExpiresAt),
		State: GrantState(r.State), DecidedBy: r.DecidedBy, DecidedAt: fromNanos(r.DecidedAt),
		DecisionReason: r.DecisionReason, ExpiresAt: fromNanos(r.ExpiresAt), RevokedBy: r.RevokedBy,
		RevokedAt: fromNanos(r.RevokedAt), AgentID: r.AgentID, Statement: r.Statement, Signature: sig}
}

// CreateBreakGlassRequest stores a new pending request.
func (s *Store) CreateBreakGlassRequest(ctx context.Context, g BreakGlassGrant) error {
	switch {
	case g.ID == "" || g.InstallID == "" || g.Role == "" || g.RequestedBy == "":
		return errs.E(errs.Invalid, "break-glass request: id, install, role and requested_by are required")
	case g.Duration <= 0:
		return errs.E(errs.Invalid, "break-glass request: duration must be positive")
	}
	if err := requireTime("requested_at", g.RequestedAt); err != nil {
		return err
	}
	if err := requireTime("request_expires_at", g.RequestExpiresAt); err != nil {
		return err
	}
	return s.writeOne(ctx, "create break-glass request", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`INSERT INTO break_glass_grants (id, install_id, role, role_description,
			reason, requested_by, requested_at, duration_ns, request_expires_at, state)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')`), g.ID, g.InstallID, g.Role, g.RoleDescription,
			g.Reason, g.RequestedBy, nanos(g.RequestedAt), int64(g.Duration), nanos(g.RequestExpiresAt))
		if isForeignKey(err) {
			return errs.E(errs.NotFound, "install %q not found", g.InstallID)
		}
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: g.InstallID, At: g.RequestedAt, Kind: "breakglass.requested", Actor: g.RequestedBy,
			Subject: "breakglass:" + g.ID, Data: map[string]string{"role": g.Role, "reason": truncate(g.Reason, 512),
				"duration": g.Duration.String(), "request_expires_at": g.RequestExpiresAt.UTC().Format(time.RFC3339)}})
	})
}

// ListBreakGlassGrants lists the requests of install installID (every
// install's when empty), newest first.
func (s *Store) ListBreakGlassGrants(ctx context.Context, installID string) ([]BreakGlassGrant, error) {
	var rows []grantRow
	var err error
	if installID == "" {
		err = s.r.SelectContext(ctx, &rows, `SELECT `+grantCols+` FROM break_glass_grants ORDER BY requested_at DESC, id DESC LIMIT 1000`)
	} else {
		err = s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+grantCols+` FROM break_glass_grants WHERE install_id = ?
			ORDER BY requested_at DESC, id DESC LIMIT 1000`), installID)
	}
	if err != nil {
		return nil, fmt.Errorf("list break-glass grants: %w", err)
	}
	out := make([]BreakGlassGrant, len(rows))
	for i, r := range rows {
		out[i] = r.grant()
	}
	return out, nil
}

// GetBreakGlassGrant returns the request with id id.
func (s *Store) GetBreakGlassGrant(ctx context.Context, id string) (BreakGlassGrant, error) {
	var r grantRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+grantCols+` FROM break_glass_grants WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return BreakGlassGrant{}, errs.E(errs.NotFound, "break-glass request %q not found", id)
	}
	if err != nil {
		return BreakGlassGrant{}, fmt.Errorf("get break-glass grant %s: %w", id, err)
	}
	return r.grant(), nil
}

// BreakGlassDecision is the customer's decision as the store records it:
// the agent's signed statement, already verified by the caller.
type BreakGlassDecision struct {
	GrantID   string
	InstallID string
	AgentID   string
	// State is approved, denied or revoked.
	State     GrantState
	By        string
	At        time.Time
	Reason    string
	ExpiresAt time.Time
	Statement string
	Signature []byte
}

// DecideBreakGlass records decision d at now: approve or deny a request
// still pending and unexpired, or revoke a grant approved. The request
// must belong to d's install. It returns the grant as recorded.
func (s *Store) DecideBreakGlass(ctx context.Context, d BreakGlassDecision, now time.Time) (BreakGlassGrant, error) {
	if err := requireTime("now", now); err != nil {
		return BreakGlassGrant{}, err
	}
	var q string
	var args []any
	switch d.State {
	case GrantApproved, GrantDenied:
		q = `UPDATE break_glass_grants SET state = ?, decided_by = ?, decided_at = ?, decision_reason = ?,
			expires_at = ?, agent_id = ?, statement = ?, signature = ?
			WHERE id = ? AND install_id = ? AND state = 'pending' AND request_expires_at > ?`
		args = []any{string(d.State), d.By, nanos(d.At), d.Reason, nanos(d.ExpiresAt), d.AgentID, d.Statement,
			base64.StdEncoding.EncodeToString(d.Signature), d.GrantID, d.InstallID, nanos(now)}
	case GrantRevoked:
		// The approval's statement and signature stay: they are what the
		// grant was; a revocation only ends it sooner.
		q = `UPDATE break_glass_grants SET state = 'revoked', revoked_by = ?, revoked_at = ?, decision_reason = ?
			WHERE id = ? AND install_id = ? AND state = 'approved'`
		args = []any{d.By, nanos(d.At), d.Reason, d.GrantID, d.InstallID}
	default:
		return BreakGlassGrant{}, errs.E(errs.Invalid, "break-glass decision: state %q: want approved, denied or revoked", d.State)
	}
	var out BreakGlassGrant
	err := s.write(ctx, "decide break-glass request", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(q), args...)
		if err != nil {
			return err
		}
		var r grantRow
		gerr := tx.GetContext(ctx, &r, s.bind(`SELECT `+grantCols+` FROM break_glass_grants WHERE id = ?`), d.GrantID)
		if errors.Is(gerr, sql.ErrNoRows) || (gerr == nil && r.InstallID != d.InstallID) {
			return errs.E(errs.NotFound, "break-glass request %q not found for this install", d.GrantID)
		}
		if gerr != nil {
			return gerr
		}
		out = r.grant()
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.E(errs.Conflict, "break-glass request %s is %s: only a pending request can be approved or denied, and only an approved grant revoked", d.GrantID, out.StateAt(now))
		}
		// A step the customer took on the agent, signed with its key: the
		// record keeps the signed statement, which anyone can check
		// against the agent's public key.
		data := map[string]string{"by": d.By, "reason": truncate(d.Reason, 512), "statement": d.Statement,
			"signature": base64.StdEncoding.EncodeToString(d.Signature)}
		if d.State == GrantApproved {
			data["expires_at"] = d.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: d.InstallID, At: now, Kind: "breakglass." + string(d.State), Actor: "agent:" + d.AgentID,
			Subject: "breakglass:" + d.GrantID, Data: data})
	})
	return out, err
}
