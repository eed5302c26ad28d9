-- +goose Up
-- An agent's health, decided by imsd's health sweeper from what is stored
-- here (last_seen_at, connected_at, late heartbeats, the condition the
-- agent reports):
-- healthy, degraded or offline, since when, and why. Every replica may
-- sweep; a change is a conditional write, so it is recorded once.
ALTER TABLE agents ADD COLUMN health TEXT NOT NULL DEFAULT 'healthy'
    CHECK (health = 'healthy' OR health = 'degraded' OR health = 'offline');
ALTER TABLE agents ADD COLUMN health_since INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN health_reason TEXT NOT NULL DEFAULT '';
-- When the agent's current (or last) stream said hello: the grace period
-- after a reconnect or an update starts there.
ALTER TABLE agents ADD COLUMN connected_at INTEGER NOT NULL DEFAULT 0;
-- The condition the agent last reported (JSON, '' for none), and when
-- imsd last got one of its heartbeats late on a live stream.
ALTER TABLE agents ADD COLUMN agent_condition TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN late_heartbeat_at INTEGER NOT NULL DEFAULT 0;
-- Alerting: the health last alerted on (a recovery is alerted as
-- 'healthy'), and the last alert of a problem (when, which health), for
-- the de-duplication window.
ALTER TABLE agents ADD COLUMN alerted_health TEXT NOT NULL DEFAULT 'healthy';
ALTER TABLE agents ADD COLUMN problem_alert_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN problem_alert_health TEXT NOT NULL DEFAULT '';

-- The id of imsd's signing key the agent last acknowledged trusting (its
-- hello's imsd_key_ids), and when: imsd key retire waits for every agent.
ALTER TABLE agents ADD COLUMN imsd_key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN imsd_key_acked_at INTEGER NOT NULL DEFAULT 0;

-- A revoked agent (byoc agent revoke): refused from revoked_at on.
ALTER TABLE agents ADD COLUMN revoked_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN revoked_reason TEXT NOT NULL DEFAULT '';

-- Alerts waiting for delivery to a sink, durable across restarts: one row
-- per alert and sink, written with the alert's decision; delivered_at is
-- set once the sink took it, failed_at once imsd gave up.
CREATE TABLE alert_outbox (
    id           TEXT PRIMARY KEY,
    alert_id     TEXT NOT NULL,
    sink         TEXT NOT NULL,
    install_id   TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    delivered_at INTEGER NOT NULL DEFAULT 0,
    failed_at    INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX alert_outbox_due ON alert_outbox (next_at) WHERE delivered_at = 0 AND failed_at = 0;

-- +goose Down
DROP TABLE alert_outbox;
ALTER TABLE agents DROP COLUMN revoked_reason;
ALTER TABLE agents DROP COLUMN revoked_at;
ALTER TABLE agents DROP COLUMN imsd_key_acked_at;
ALTER TABLE agents DROP COLUMN imsd_key_id;
ALTER TABLE agents DROP COLUMN problem_alert_health;
ALTER TABLE agents DROP COLUMN problem_alert_at;
ALTER TABLE agents DROP COLUMN alerted_health;
ALTER TABLE agents DROP COLUMN late_heartbeat_at;
ALTER TABLE agents DROP COLUMN agent_condition;
ALTER TABLE agents DROP COLUMN connected_at;
ALTER TABLE agents DROP COLUMN health_reason;
ALTER TABLE agents DROP COLUMN health_since;
ALTER TABLE agents DROP COLUMN health;
