-- +goose Up
-- The plugin releases an agent's pin file names and what the agent
-- verified of each (its signature, digests and type), as the agent
-- reports them (JSON, '' for never reported).
ALTER TABLE agents ADD COLUMN plugin_report TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE agents DROP COLUMN plugin_report;
