-- Timestamps are Unix nanoseconds, 0 = unset. JSON documents are TEXT.

-- +goose Up
CREATE TABLE api_tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('admin', 'viewer')),
    hash       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE apps (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL
);

CREATE TABLE installs (
    id         TEXT PRIMARY KEY,
    app_id     TEXT NOT NULL REFERENCES apps (id),
    name       TEXT NOT NULL UNIQUE,
    inputs     TEXT NOT NULL DEFAULT '{}',
    created_at BIGINT NOT NULL
);
CREATE INDEX installs_app ON installs (app_id, name);

CREATE TABLE enrollment_tokens (
    hash          TEXT PRIMARY KEY,
    install_id    TEXT NOT NULL REFERENCES installs (id),
    expires_at    BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    used_at       BIGINT NOT NULL DEFAULT 0,
    used_by_agent TEXT NOT NULL DEFAULT ''
);

CREATE TABLE agents (
    id           TEXT PRIMARY KEY,
    install_id   TEXT NOT NULL REFERENCES installs (id),
    public_key   BYTEA NOT NULL,
    hostname     TEXT NOT NULL DEFAULT '',
    version      TEXT NOT NULL DEFAULT '',
    enrolled_at  BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX agents_install ON agents (install_id, enrolled_at);

CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    install_id       TEXT NOT NULL REFERENCES installs (id),
    component_type   TEXT NOT NULL,
    operation        TEXT NOT NULL,
    config           TEXT NOT NULL DEFAULT '{}',
    state            TEXT NOT NULL CHECK (state IN ('queued', 'assigned', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    timeout_ns       BIGINT NOT NULL CHECK (timeout_ns > 0),
    fencing_token    BIGINT NOT NULL DEFAULT 0,
    agent_id         TEXT NOT NULL DEFAULT '',
    lease_deadline   BIGINT NOT NULL DEFAULT 0,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    cancel_reason    TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    started_at       BIGINT NOT NULL DEFAULT 0,
    ended_at         BIGINT NOT NULL DEFAULT 0,
    exit_code        INTEGER NOT NULL DEFAULT 0,
    error            TEXT NOT NULL DEFAULT '',
    outputs          TEXT NOT NULL DEFAULT '{}',
    created_by       TEXT NOT NULL DEFAULT '',
    -- A job handed out is held by an agent; a queued job is held by nobody.
    CHECK (state NOT IN ('assigned', 'running') OR (agent_id <> '' AND lease_deadline > 0)),
    CHECK (state <> 'queued' OR agent_id = '')
);
-- Claims (oldest queued of an install) and listings by install.
CREATE INDEX jobs_install_state ON jobs (install_id, state, created_at, id);
-- The lease sweeper.
CREATE INDEX jobs_state_lease ON jobs (state, lease_deadline);
-- Listings across all installs, newest first.
CREATE INDEX jobs_created ON jobs (created_at, id);

CREATE TABLE job_logs (
    job_id  TEXT NOT NULL REFERENCES jobs (id),
    attempt INTEGER NOT NULL,
    seq     BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    stream  INTEGER NOT NULL,
    text    TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt, seq)
);

-- +goose Down
DROP TABLE job_logs;
DROP TABLE jobs;
DROP TABLE agents;
DROP TABLE enrollment_tokens;
DROP TABLE installs;
DROP TABLE apps;
DROP TABLE api_tokens;
