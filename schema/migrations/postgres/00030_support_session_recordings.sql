-- +goose Up
-- The vendor's copy of a support session's recording (asciicast v2), kept
-- only when the customer's agent sends it (agentd
-- --session-recordings-to-vendor; off by default). sha256 is imsd's own
-- hash of data, which matches the one the agent reported at the end.
CREATE TABLE support_session_recordings (
    session_id TEXT PRIMARY KEY,
    install_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    data BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX support_session_recordings_install ON support_session_recordings (install_id);

-- +goose Down
DROP TABLE support_session_recordings;
