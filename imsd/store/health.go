// Agent health and alerts: what the health sweeper reads, its conditional
// writes (a change of health, an alert decided), and the alert outbox the
// deliverer works through. Every replica may sweep and deliver; each write
// here is conditional on what the caller read, so a change or an alert is
// recorded once however many replicas decide it.

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// Health is an agent's health: healthy, degraded or offline.
type Health string

// The agent health states.
const (
	AgentHealthy  Health = "healthy"
	AgentDegraded Health = "degraded"
	AgentOffline  Health = "offline"
)

// Severity orders healths: healthy 0, degraded 1, offline 2.
func (h Health) Severity() int {
	switch h {
	case AgentDegraded:
		return 1
	case AgentOffline:
		return 2
	}
	return 0
}

// AgentCondition is what an agent last reported of its own condition.
type AgentCondition struct {
	// DiskUsedPercent is how full its state directory's file system is
	// (0: it cannot tell).
	DiskUsedPercent int `json:"disk_used_percent,omitempty"`
	// FailedInRow counts its jobs that failed since its last success.
	FailedInRow int       `json:"failed_in_row,omitempty"`
	ReportedAt  time.Time `json:"reported_at"`
}

// AgentHealth is what the health sweeper reads of one agent.
type AgentHealth struct {
	AgentID     string `db:"id"`
	InstallID   string `db:"install_id"`
	InstallName string `db:"install_name"`
	// InstallLabels are the install's labels, which alerts carry so that
	// a receiver can route them.
	InstallLabels map[string]string
	Version       string `db:"version"`
	EnrolledAt    time.Time
	// LastSeenAt is zero until the agent first connected.
	LastSeenAt  time.Time
	ConnectedAt time.Time
	// LateHeartbeatAt is when imsd last got a heartbeat of it late.
	LateHeartbeatAt time.Time
	Condition       *AgentCondition
	Health          Health
	HealthSince     time.Time
	Reason          string
	// AlertedHealth is the health last alerted on (healthy before any
	// alert, and after a recovery's); ProblemAlertAt and
	// ProblemAlertHealth are the last alert of a problem.
	AlertedHealth      Health
	ProblemAlertAt     time.Time
	ProblemAlertHealth Health
}

type agentHealthRow struct {
	ID                 string `db:"id"`
	InstallID          string `db:"install_id"`
	InstallName        string `db:"install_name"`
	Version            string `db:"version"`
	EnrolledAt         int64  `db:"enrolled_at"`
	LastSeenAt         int64  `db:"last_seen_at"`
	ConnectedAt        int64  `db:"connected_at"`
	LateHeartbeatAt    int64  `db:"late_heartbeat_at"`
	Condition          string `db:"agent_condition"`
	Health             string `db:"health"`
	HealthSince        int64  `db:"health_since"`
	Reason             string `db:"health_reason"`
	AlertedHealth      string `db:"alerted_health"`
	ProblemAlertAt     int64  `db:"problem_alert_at"`
	ProblemAlertHealth string `db:"problem_alert_health"`
}

// ListAgentHealth reads every agent's health inputs and state, ordered by
// agent id; revoked agents are left out.
func (s *Store) ListAgentHealth(ctx context.Context) ([]AgentHealth, error) {
	// Scanned by hand: every replica reads every agent each sweep, and
	// sqlx's reflection was most of the cost (BenchmarkSweep10k).
	rows, err := s.r.QueryContext(ctx, `SELECT a.id, a.install_id, i.name, a.version, a.enrolled_at, a.last_seen_at,
		a.connected_at, a.late_heartbeat_at, a.agent_condition, a.health, a.health_since, a.health_reason, a.alerted_health, a.problem_alert_at,
		a.problem_alert_health, i.labels FROM agents a JOIN installs i ON i.id = a.install_id WHERE a.revoked_at = 0 ORDER BY a.id`)
	if err != nil {
		return nil, fmt.Errorf("list agent health: %w", err)
	}
	defer rows.Close()
	var out []AgentHealth
	for rows.Next() {
		var r agentHealthRow
		var lb string
		if err := rows.Scan(&r.ID, &r.InstallID, &r.InstallName, &r.Version, &r.EnrolledAt, &r.LastSeenAt, &r.ConnectedAt, &r.LateHeartbeatAt,
			&r.Condition, &r.Health, &r.HealthSince, &r.Reason, &r.AlertedHealth, &r.ProblemAlertAt, &r.ProblemAlertHealth, &lb); err != nil {
			return nil, fmt.Errorf("list agent health: %w", err)
		}
		labels, err := decodeMap(lb)
		if err != nil {
			return nil, fmt.Errorf("list agent health: install %s labels: %w", r.InstallID, err)
		}
		out = append(out, AgentHealth{AgentID: r.ID, InstallID: r.InstallID, InstallName: r.InstallName, InstallLabels: labels, Version: r.Version,
			EnrolledAt: fromNanos(r.EnrolledAt), LastSeenAt: fromNanos(r.LastSeenAt), ConnectedAt: fromNanos(r.ConnectedAt),
			LateHeartbeatAt: fromNanos(r.LateHeartbeatAt), Condition: decodeCondition(r.Condition), Health: Health(r.Health),
			HealthSince: fromNanos(r.HealthSince), Reason: r.Reason, AlertedHealth: Health(r.AlertedHealth),
			ProblemAlertAt: fromNanos(r.ProblemAlertAt), ProblemAlertHealth: Health(r.ProblemAlertHealth)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent health: %w", err)
	}
	return out, nil
}

func decodeCondition(s string) *AgentCondition {
	if s == "" {
		return nil
	}
	var c AgentCondition
	// imsd wrote it; an unreadable one counts as never reported.
	if json.Unmarshal([]byte(s), &c) != nil {
		return nil
	}
	return &c
}

// SetAgentHealth records agent a's health as h, for reason, at now. It is
// conditional on the health and since that a holds (what the caller read):
// changed is false, and nothing is written, when the row has moved on
// (another replica recorded the change first). A change of health is an
// audit event (agent.health_changed, actor imsd); a new reason for the
// same health only replaces the reason.
func (s *Store) SetAgentHealth(ctx context.Context, a AgentHealth, h Health, reason string, now time.Time) (changed bool, err error) {
	if err := requireTime("now", now); err != nil {
		return false, err
	}
	if h.Severity() == 0 && h != AgentHealthy {
		return false, errs.Field("health", "%q is not healthy, degraded or offline", h)
	}
	reason = truncate(reason, 512)
	err = s.writeOne(ctx, "set agent health", func(tx *txn) error {
		if h == a.Health {
			res, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET health_reason = ? WHERE id = ? AND health = ? AND health_since = ?`),
				reason, a.AgentID, string(a.Health), nanos(a.HealthSince))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			changed = n == 1
			return err
		}
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET health = ?, health_since = ?, health_reason = ?
			WHERE id = ? AND health = ? AND health_since = ?`),
			string(h), nanos(now), reason, a.AgentID, string(a.Health), nanos(a.HealthSince))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		changed = true
		return s.Audit(ctx, tx, AuditEvent{Chain: a.InstallID, At: now, Kind: "agent.health_changed", Actor: "imsd", Subject: "agent:" + a.AgentID,
			Data: map[string]string{"from": string(a.Health), "to": string(h), "reason": reason}})
	})
	return changed && err == nil, err
}

// Alert is one alert the health sweeper decided: agent a's health is h
// (healthy: a recovery).
type Alert struct {
	ID        string
	AgentID   string
	InstallID string
	Health    Health
	// Body is the alert as every sink's deliverer reads it (JSON).
	Body string
}

// RecordAlert records alert al for agent a, as read: its alert state
// becomes al.Health (and, for a problem, the last problem alert is al at
// now), and one outbox row per sink is written for delivery, all in one
// transaction. It is conditional on a's alert state as read: recorded is
// false, and nothing is written, when another replica recorded one first.
func (s *Store) RecordAlert(ctx context.Context, a AgentHealth, al Alert, sinks []string, now time.Time) (recorded bool, err error) {
	if err := requireTime("now", now); err != nil {
		return false, err
	}
	problemAt, problemHealth := a.ProblemAlertAt, a.ProblemAlertHealth
	if al.Health != AgentHealthy {
		problemAt, problemHealth = now, al.Health
	}
	err = s.write(ctx, "record alert", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET alerted_health = ?, problem_alert_at = ?, problem_alert_health = ?
			WHERE id = ? AND alerted_health = ? AND problem_alert_at = ?`),
			string(al.Health), nanos(problemAt), string(problemHealth), a.AgentID, string(a.AlertedHealth), nanos(a.ProblemAlertAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		recorded = true
		for _, sink := range sinks {
			if _, err := tx.ExecContext(ctx, s.bind(`INSERT INTO alert_outbox (id, alert_id, sink, install_id, agent_id, body, created_at, next_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`), al.ID+"/"+sink, al.ID, sink, al.InstallID, al.AgentID, al.Body, nanos(now), nanos(now)); err != nil {
				return err
			}
		}
		return nil
	})
	return recorded && err == nil, err
}

// OutboxAlert is one alert waiting for (or done with) delivery to a sink.
type OutboxAlert struct {
	ID          string `db:"id"`
	AlertID     string `db:"alert_id"`
	Sink        string `db:"sink"`
	InstallID   string `db:"install_id"`
	AgentID     string `db:"agent_id"`
	Body        string `db:"body"`
	CreatedAt   time.Time
	Attempts    int `db:"attempts"`
	NextAt      time.Time
	DeliveredAt time.Time
	FailedAt    time.Time
	LastError   string `db:"last_error"`
}

type outboxRow struct {
	ID          string `db:"id"`
	AlertID     string `db:"alert_id"`
	Sink        string `db:"sink"`
	InstallID   string `db:"install_id"`
	AgentID     string `db:"agent_id"`
	Body        string `db:"body"`
	CreatedAt   int64  `db:"created_at"`
	Attempts    int    `db:"attempts"`
	NextAt      int64  `db:"next_at"`
	DeliveredAt int64  `db:"delivered_at"`
	FailedAt    int64  `db:"failed_at"`
	LastError   string `db:"last_error"`
}

const outboxCols = `id, alert_id, sink, install_id, agent_id, body, created_at, attempts, next_at, delivered_at, failed_at, last_error`

func (r outboxRow) alert() OutboxAlert {
	return OutboxAlert{ID: r.ID, AlertID: r.AlertID, Sink: r.Sink, InstallID: r.InstallID, AgentID: r.AgentID, Body: r.Body,
		CreatedAt: fromNanos(r.CreatedAt), Attempts: r.Attempts, NextAt: fromNanos(r.NextAt), DeliveredAt: fromNanos(r.DeliveredAt),
		FailedAt: fromNanos(r.FailedAt), LastError: r.LastError}
}

// DueAlerts returns up to limit undelivered alerts whose next attempt is
// due at now, oldest first.
func (s *Store) DueAlerts(ctx context.Context, now time.Time, limit int) ([]OutboxAlert, error) {
	var rows []outboxRow
	err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT `+outboxCols+` FROM alert_outbox
		WHERE delivered_at = 0 AND failed_at = 0 AND next_at <= ? ORDER BY next_at, id LIMIT ?`), nanos(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due alerts: %w", err)
	}
	out := make([]OutboxAlert, len(rows))
	for i, r := range rows {
		out[i] = r.alert()
	}
	return out, nil
}

// ListAlertOutbox returns every alert of the outbox, oldest first (for
// operators and tests).
func (s *Store) ListAlertOutbox(ctx context.Context) ([]OutboxAlert, error) {
	var rows []outboxRow
	if err := s.r.SelectContext(ctx, &rows, `SELECT `+outboxCols+` FROM alert_outbox ORDER BY created_at, id`); err != nil {
		return nil, fmt.Errorf("list alert outbox: %w", err)
	}
	out := make([]OutboxAlert, len(rows))
	for i, r := range rows {
		out[i] = r.alert()
	}
	return out, nil
}

// ClaimAlert takes alert o (as DueAlerts read it) for one attempt: its
// next attempt moves to until (when an attempt that never reports back
// may be made again) and its attempts count up. claimed is false when
// another replica took it first or it was delivered meanwhile.
func (s *Store) ClaimAlert(ctx context.Context, o OutboxAlert, until time.Time) (claimed bool, err error) {
	if err := requireTime("until", until); err != nil {
		return false, err
	}
	err = s.writeOne(ctx, "claim alert", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`UPDATE alert_outbox SET next_at = ?, attempts = attempts + 1
			WHERE id = ? AND next_at = ? AND delivered_at = 0 AND failed_at = 0`), nanos(until), o.ID, nanos(o.NextAt))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		claimed = n == 1
		return err
	})
	return claimed && err == nil, err
}

// AlertDelivered records that the sink took alert id at now.
func (s *Store) AlertDelivered(ctx context.Context, id string, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.writeOne(ctx, "alert delivered", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`UPDATE alert_outbox SET delivered_at = ?, last_error = '' WHERE id = ?`), nanos(now), id)
		return err
	})
}

// AlertAttemptFailed records a failed delivery of alert id: the next
// attempt at next, or, with giveUp, none (failed at now).
func (s *Store) AlertAttemptFailed(ctx context.Context, id, why string, next time.Time, giveUp bool, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	failedAt := int64(0)
	if giveUp {
		failedAt = nanos(now)
	}
	return s.writeOne(ctx, "alert attempt failed", func(tx *txn) error {
		_, err := tx.ExecContext(ctx, s.bind(`UPDATE alert_outbox SET next_at = ?, failed_at = ?, last_error = ? WHERE id = ? AND delivered_at = 0`),
			nanos(next), failedAt, truncate(why, 512), id)
		return err
	})
}

// AgentConnected records that agent id's stream said hello at now, as
// version (kept when empty): it was seen then (never backwards, as
// TouchAgent), and the grace period after a reconnect or an update
// starts there.
func (s *Store) AgentConnected(ctx context.Context, id, version string, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.updateAgent(ctx, "agent connected", id, nil, `UPDATE agents SET connected_at = ?, disconnected_at = 0,
		last_seen_at = CASE WHEN last_seen_at < ? THEN ? ELSE last_seen_at END,
		version = CASE WHEN ? = '' THEN version ELSE ? END WHERE id = ?`, nanos(now), nanos(now), nanos(now), version, version)
}

// AgentDisconnected records that agent id's stream, whose hello was
// recorded at connectedAt (AgentConnected), ended at now, the agent last
// heard at lastHeard (last-seen never moves backwards). The end is
// recorded only while no later hello was: an agent that already said
// hello to another replica stays connected there.
func (s *Store) AgentDisconnected(ctx context.Context, id string, connectedAt, lastHeard, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	if err := requireTime("connected at", connectedAt); err != nil {
		return err
	}
	return s.updateAgent(ctx, "agent disconnected", id, nil, `UPDATE agents SET
		disconnected_at = CASE WHEN connected_at = ? THEN ? ELSE disconnected_at END,
		last_seen_at = CASE WHEN last_seen_at < ? THEN ? ELSE last_seen_at END WHERE id = ?`,
		nanos(connectedAt), nanos(now), nanos(lastHeard), nanos(lastHeard))
}

// RecordLateHeartbeat records that a heartbeat of agent id came late on a
// live stream at now (later than twice the heartbeat interval).
func (s *Store) RecordLateHeartbeat(ctx context.Context, id string, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.updateAgent(ctx, "record late heartbeat", id, nil, `UPDATE agents SET late_heartbeat_at = ? WHERE id = ?`, nanos(now))
}

// SetAgentCondition records the condition agent id reported at now. imsd
// calls it when the condition differs from what it last recorded.
func (s *Store) SetAgentCondition(ctx context.Context, id string, c AgentCondition, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	c.ReportedAt = now.UTC()
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.updateAgent(ctx, "record agent condition", id, nil, `UPDATE agents SET agent_condition = ? WHERE id = ?`, string(b))
}

// AckAgentKey records that agent id acknowledged trusting imsd's signing
// key keyID at now.
func (s *Store) AckAgentKey(ctx context.Context, id, keyID string, now time.Time) error {
	if err := requireTime("now", now); err != nil {
		return err
	}
	return s.updateAgent(ctx, "acknowledge imsd key", id, nil, `UPDATE agents SET imsd_key_id = ?, imsd_key_acked_at = ? WHERE id = ?`, keyID, nanos(now))
}

// AgentsNotAcking lists the agents (id, install name, the key they last
// acknowledged) that have not acknowledged imsd's key keyID, by agent id;
// revoked agents are left out.
func (s *Store) AgentsNotAcking(ctx context.Context, keyID string) ([]AgentKeyAck, error) {
	var rows []AgentKeyAck
	err := s.r.SelectContext(ctx, &rows, s.bind(`SELECT a.id, i.name AS install_name, a.imsd_key_id FROM agents a
		JOIN installs i ON i.id = a.install_id WHERE a.imsd_key_id <> ? AND a.revoked_at = 0 ORDER BY a.id`), keyID)
	if err != nil {
		return nil, fmt.Errorf("agents not acknowledging key %s: %w", keyID, err)
	}
	return rows, nil
}

// AgentKeyAck is an agent and the imsd key it last acknowledged.
type AgentKeyAck struct {
	AgentID     string `db:"id"`
	InstallName string `db:"install_name"`
	KeyID       string `db:"imsd_key_id"`
}

// RevokeAgents revokes agent agentID of install installID, or every agent
// of the install not revoked yet when agentID is empty, for reason, by
// actor, at now: each is an audit event (agent.revoked) in the install's
// chain. It returns the agents revoked; none is a NotFound error.
func (s *Store) RevokeAgents(ctx context.Context, installID, agentID, reason, actor string, now time.Time) ([]string, error) {
	if err := requireTime("now", now); err != nil {
		return nil, err
	}
	var ids []string
	err := s.write(ctx, "revoke agents", func(tx *txn) error {
		ids = nil
		if err := tx.SelectContext(ctx, &ids, s.bind(`SELECT id FROM agents WHERE install_id = ? AND (? = '' OR id = ?) AND revoked_at = 0 ORDER BY id`),
			installID, agentID, agentID); err != nil {
			return err
		}
		if len(ids) == 0 {
			if agentID != "" {
				return errs.E(errs.NotFound, "install %s has no agent %q that is not revoked already", installID, agentID)
			}
			return errs.E(errs.NotFound, "install %s has no agent that is not revoked already", installID)
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, s.bind(`UPDATE agents SET revoked_at = ?, revoked_reason = ? WHERE id = ?`), nanos(now), truncate(reason, 512), id); err != nil {
				return err
			}
			if err := s.Audit(ctx, tx, AuditEvent{Chain: installID, At: now, Kind: "agent.revoked", Actor: actor, Subject: "agent:" + id,
				Data: map[string]string{"reason": truncate(reason, 512)}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}
