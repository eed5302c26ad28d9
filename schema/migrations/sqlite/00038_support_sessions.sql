-- +goose Up
-- Support sessions imsd audited as started, and whether their end is
-- audited yet: support.session.ended is written once per session, by
-- whichever comes first of the call that relayed it and the agent that
-- ran it (which reports the end on its next stream when the one that
-- carried the session broke, or imsd restarted). ended_at 0: not yet.
CREATE TABLE support_sessions (
    id TEXT PRIMARY KEY,
    install_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at INTEGER NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE support_sessions;
