-- +goose Up
-- Action runs are workflows of kind 'action' with one step: the action
-- they run, what started it (manual, cron) and the permission mode the
-- action declares (enforced by the agent; recorded here for the run).
ALTER TABLE workflows ADD COLUMN action TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN triggered_by TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN mode TEXT NOT NULL DEFAULT '';
CREATE INDEX workflows_action ON workflows (install_id, action, created_at);

-- An install's health: the result of its latest health-check action run
-- ('' until one has ended), when it ended, the failing run's error, and
-- which run it was.
ALTER TABLE installs ADD COLUMN health TEXT NOT NULL DEFAULT ''
    CHECK (health IN ('', 'healthy', 'unhealthy'));
ALTER TABLE installs ADD COLUMN health_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE installs ADD COLUMN health_error TEXT NOT NULL DEFAULT '';
ALTER TABLE installs ADD COLUMN health_workflow_id TEXT NOT NULL DEFAULT '';

-- The cron ticks fired, per install and action: the primary key makes a
-- second insert of one tick fail, so a tick fires once across restarts and
-- replicas; the tick and its run's workflow are written in one transaction.
-- workflow_id is '' for a tick skipped because an earlier run of the
-- action had not ended. Only each action's latest tick is kept.
CREATE TABLE trigger_ticks (
    install_id  TEXT NOT NULL REFERENCES installs (id),
    action      TEXT NOT NULL,
    tick_at     BIGINT NOT NULL,
    workflow_id TEXT NOT NULL DEFAULT '',
    fired_at    BIGINT NOT NULL,
    PRIMARY KEY (install_id, action, tick_at)
);

-- +goose Down
DROP TABLE trigger_ticks;
ALTER TABLE installs DROP COLUMN health_workflow_id;
ALTER TABLE installs DROP COLUMN health_error;
ALTER TABLE installs DROP COLUMN health_at;
ALTER TABLE installs DROP COLUMN health;
DROP INDEX workflows_action;
ALTER TABLE workflows DROP COLUMN mode;
ALTER TABLE workflows DROP COLUMN triggered_by;
ALTER TABLE workflows DROP COLUMN action;
