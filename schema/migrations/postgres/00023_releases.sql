-- +goose Up
-- A release rolls one app revision (a rollback: each install's previous
-- one) out to many installs, wave by wave. waves is the plan as JSON
-- ([{name, spec, size}]); current_wave is the wave being rolled out
-- (0-based); approved_wave the last wave an operator approved (-1: none);
-- failures_base the failures an operator accepted by resuming a halted
-- release, which the threshold no longer counts. plan_groups is the
-- installs' plans grouped by identical plan, as JSON.
CREATE TABLE releases (
    id               TEXT PRIMARY KEY,
    app_id           TEXT NOT NULL REFERENCES apps (id),
    app_revision     BIGINT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind = 'release' OR kind = 'rollback'),
    rollback_of      TEXT NOT NULL DEFAULT '',
    state            TEXT NOT NULL CHECK (state = 'running' OR state = 'awaiting_approval' OR state = 'paused' OR state = 'halted'
                         OR state = 'succeeded' OR state = 'failed' OR state = 'cancelled'),
    waves            TEXT NOT NULL,
    selector         TEXT NOT NULL DEFAULT '',
    max_failures     BIGINT NOT NULL DEFAULT 0,
    max_failures_spec TEXT NOT NULL DEFAULT '',
    pause_between_ns BIGINT NOT NULL DEFAULT 0,
    respect_windows  BOOLEAN NOT NULL DEFAULT FALSE,
    require_approval BOOLEAN NOT NULL DEFAULT FALSE,
    current_wave     BIGINT NOT NULL DEFAULT 0,
    approved_wave    BIGINT NOT NULL DEFAULT -1,
    wave_started_at  BIGINT NOT NULL DEFAULT 0,
    wave_ended_at    BIGINT NOT NULL DEFAULT 0,
    failures_base    BIGINT NOT NULL DEFAULT 0,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    reason           TEXT NOT NULL DEFAULT '',
    error            TEXT NOT NULL DEFAULT '',
    rolled_back_by   TEXT NOT NULL DEFAULT '',
    plan_groups      TEXT NOT NULL DEFAULT '[]',
    created_at       BIGINT NOT NULL,
    created_by       TEXT NOT NULL DEFAULT '',
    ended_at         BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX releases_state ON releases (state, created_at, id);

-- The installs of a release: which wave, the revision before and the one
-- rolled out, the workflow that rolls it out, and where it is. A pending
-- install whose maintenance window is closed is 'waiting' until
-- window_opens_at.
CREATE TABLE release_installs (
    release_id      TEXT NOT NULL REFERENCES releases (id),
    install_id      TEXT NOT NULL REFERENCES installs (id),
    wave            BIGINT NOT NULL,
    position        BIGINT NOT NULL,
    from_revision   BIGINT NOT NULL,
    to_revision     BIGINT NOT NULL,
    plan_group      BIGINT NOT NULL DEFAULT 0,
    state           TEXT NOT NULL CHECK (state = 'pending' OR state = 'waiting' OR state = 'running' OR state = 'succeeded'
                        OR state = 'failed' OR state = 'cancelled' OR state = 'skipped'),
    workflow_id     TEXT NOT NULL DEFAULT '',
    error           TEXT NOT NULL DEFAULT '',
    window_opens_at BIGINT NOT NULL DEFAULT 0,
    started_at      BIGINT NOT NULL DEFAULT 0,
    ended_at        BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (release_id, install_id)
);
CREATE INDEX release_installs_wave ON release_installs (release_id, wave, position);
CREATE INDEX release_installs_install ON release_installs (install_id);

-- The release a workflow (and so each of its jobs) belongs to.
ALTER TABLE workflows ADD COLUMN release_id TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN release_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE jobs DROP COLUMN release_id;
ALTER TABLE workflows DROP COLUMN release_id;
DROP TABLE release_installs;
DROP TABLE releases;
