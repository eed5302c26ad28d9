-- +goose Up
-- Two agentd processes sharing one identity (a copied state dir) take
-- turns replacing each other's stream. imsd records the last time it saw
-- that, and what it saw, for operators (byoc install get, the console).
ALTER TABLE agents ADD COLUMN conflict_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN conflict TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE agents DROP COLUMN conflict;
ALTER TABLE agents DROP COLUMN conflict_at;
