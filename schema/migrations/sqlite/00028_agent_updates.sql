-- +goose Up
-- An agent's update policy and latest update decision as it reports them
-- (JSON, '' for never reported), and the agent release last offered to
-- it (byoc agent update; JSON, '' for none).
ALTER TABLE agents ADD COLUMN update_report TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN update_offer TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE agents DROP COLUMN update_offer;
ALTER TABLE agents DROP COLUMN update_report;
