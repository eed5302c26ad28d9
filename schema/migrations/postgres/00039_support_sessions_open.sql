-- +goose Up
-- The support sessions whose end is not recorded yet, for imsd's sweep
-- that closes those whose agent has been gone longer than
-- --support-session-lost-after (the agent was lost; no one else will
-- record their end).
CREATE INDEX support_sessions_open ON support_sessions (started_at) WHERE ended_at = 0;

-- +goose Down
DROP INDEX support_sessions_open;
