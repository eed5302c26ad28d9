-- +goose Up
-- An agent rollout is a release of an agent release (byoc agent rollout
-- create): agent_release is its oci://...@sha256:... reference ('' for an
-- app release) and confirm_within_ns how long an offered install's agent
-- has to confirm the new version once it applied it. offer_id is the
-- update offer a rollout made to an install's agents.
ALTER TABLE releases ADD COLUMN agent_release TEXT NOT NULL DEFAULT '';
ALTER TABLE releases ADD COLUMN confirm_within_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE release_installs ADD COLUMN offer_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE release_installs DROP COLUMN offer_id;
ALTER TABLE releases DROP COLUMN confirm_within_ns;
ALTER TABLE releases DROP COLUMN agent_release;
