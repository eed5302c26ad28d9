-- +goose Up
-- A break-glass request an operator made, and what the customer decided
-- on the agent's side. 'expired' is not stored: a pending request past
-- request_expires_at, or an approved grant past expires_at, reads as
-- expired. statement and signature are the agent's signed decision
-- (rpc/agentproto; the signature in base64), kept so that anyone can
-- check it with the agent's key.
CREATE TABLE break_glass_grants (
    id                 TEXT PRIMARY KEY,
    install_id         TEXT NOT NULL REFERENCES installs(id),
    role               TEXT NOT NULL,
    role_description   TEXT NOT NULL DEFAULT '',
    reason             TEXT NOT NULL DEFAULT '',
    requested_by       TEXT NOT NULL,
    requested_at       BIGINT NOT NULL,
    duration_ns        BIGINT NOT NULL,
    request_expires_at BIGINT NOT NULL,
    state              TEXT NOT NULL DEFAULT 'pending'
        CHECK (state = 'pending' OR state = 'approved' OR state = 'denied' OR state = 'revoked'),
    decided_by         TEXT NOT NULL DEFAULT '',
    decided_at         BIGINT NOT NULL DEFAULT 0,
    decision_reason    TEXT NOT NULL DEFAULT '',
    expires_at         BIGINT NOT NULL DEFAULT 0,
    revoked_by         TEXT NOT NULL DEFAULT '',
    revoked_at         BIGINT NOT NULL DEFAULT 0,
    agent_id           TEXT NOT NULL DEFAULT '',
    statement          TEXT NOT NULL DEFAULT '',
    signature          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX break_glass_grants_install ON break_glass_grants (install_id, requested_at);

-- +goose Down
DROP TABLE break_glass_grants;
