-- +goose Up
-- A job's mode is the permission mode it needs; the agent refuses a job
-- whose mode the customer turned off, and the job ends 'refused'. An
-- agent's permissions are the customer's permission state as the agent
-- last reported it (JSON, '' for never), with the time of the report.
-- SQLite's side of this version is Go (modes.go).
ALTER TABLE jobs ADD COLUMN mode TEXT NOT NULL DEFAULT 'maintenance'
    CHECK (mode IN ('provision', 'maintenance', 'deprovision', 'break_glass'));
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('queued', 'assigned', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'refused'));
ALTER TABLE agents ADD COLUMN permissions TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN permissions_at BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE agents DROP COLUMN permissions_at;
ALTER TABLE agents DROP COLUMN permissions;
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('queued', 'assigned', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out'));
ALTER TABLE jobs DROP COLUMN mode;
