-- +goose Up
-- An install's lifecycle: what it is now (state), the app revision it last
-- applied in full, and its settings (parallelism, approval, per-component
-- overrides, and the installs/*.toml file it is managed from) as JSON.
ALTER TABLE installs ADD COLUMN state TEXT NOT NULL DEFAULT 'new'
    CHECK (state IN ('new', 'provisioning', 'active', 'failed', 'deprovisioning', 'deprovisioned'));
ALTER TABLE installs ADD COLUMN app_revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE installs ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';

-- A workflow ties the jobs of one lifecycle change of one install together.
-- An install runs one workflow at a time: the oldest queued one starts when
-- none is awaiting approval or running. inputs is the snapshot of resolved,
-- typed input values (JSON) the plan was made with.
CREATE TABLE workflows (
    id               TEXT PRIMARY KEY,
    install_id       TEXT NOT NULL REFERENCES installs (id),
    kind             TEXT NOT NULL CHECK (kind IN ('provision', 'update', 'deprovision', 'action')),
    state            TEXT NOT NULL CHECK (state IN ('queued', 'awaiting_approval', 'running', 'succeeded', 'failed', 'cancelled')),
    app_revision     INTEGER NOT NULL,
    reason           TEXT NOT NULL DEFAULT '',
    inputs           TEXT NOT NULL DEFAULT '{}',
    parallelism      INTEGER NOT NULL CHECK (parallelism >= 1),
    require_approval INTEGER NOT NULL DEFAULT 0 CHECK (require_approval IN (0, 1)),
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    cancel_reason    TEXT NOT NULL DEFAULT '',
    approved_by      TEXT NOT NULL DEFAULT '',
    approved_at      INTEGER NOT NULL DEFAULT 0,
    error            TEXT NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    created_by       TEXT NOT NULL DEFAULT '',
    started_at       INTEGER NOT NULL DEFAULT 0,
    ended_at         INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX workflows_install ON workflows (install_id, created_at, id);
CREATE INDEX workflows_state ON workflows (state, created_at, id);

-- A step is one job of a workflow (a component's apply or destroy, or an
-- action hook), run when every step it needs has succeeded. config is the
-- step's config before rendering; references are resolved when it starts.
CREATE TABLE workflow_steps (
    workflow_id    TEXT NOT NULL REFERENCES workflows (id),
    name           TEXT NOT NULL,
    position       INTEGER NOT NULL,
    component      TEXT NOT NULL DEFAULT '',
    action         TEXT NOT NULL DEFAULT '',
    component_type TEXT NOT NULL,
    operation      TEXT NOT NULL,
    needs          TEXT NOT NULL DEFAULT '[]',
    reason         TEXT NOT NULL DEFAULT '',
    config         TEXT NOT NULL DEFAULT '{}',
    timeout_ns     INTEGER NOT NULL CHECK (timeout_ns > 0),
    state          TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    job_id         TEXT NOT NULL DEFAULT '',
    attempts       INTEGER NOT NULL DEFAULT 0,
    error          TEXT NOT NULL DEFAULT '',
    started_at     INTEGER NOT NULL DEFAULT 0,
    ended_at       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow_id, name)
) STRICT;
-- Running steps, to find those whose job has ended.
CREATE INDEX workflow_steps_running ON workflow_steps (state, job_id);

-- What is deployed in an install: per component, the rendered config last
-- applied (secrets as references), its digest, its outputs and what it
-- needed, so plans compare against it and deprovision runs in reverse.
CREATE TABLE install_components (
    install_id     TEXT NOT NULL REFERENCES installs (id),
    name           TEXT NOT NULL,
    component_type TEXT NOT NULL,
    digest         TEXT NOT NULL,
    config         TEXT NOT NULL,
    outputs        TEXT NOT NULL DEFAULT '{}',
    needs          TEXT NOT NULL DEFAULT '[]',
    app_revision   INTEGER NOT NULL,
    workflow_id    TEXT NOT NULL DEFAULT '',
    job_id         TEXT NOT NULL DEFAULT '',
    deployed_at    INTEGER NOT NULL,
    PRIMARY KEY (install_id, name)
) STRICT;

-- +goose Down
DROP TABLE install_components;
DROP TABLE workflow_steps;
DROP TABLE workflows;
ALTER TABLE installs DROP COLUMN settings;
ALTER TABLE installs DROP COLUMN app_revision;
ALTER TABLE installs DROP COLUMN state;
