-- +goose Up
-- When the replica that held the agent's last stream recorded its end (0
-- while a stream is open: each hello clears it). A replica records an end
-- only if no newer hello was recorded since its own, so an agent that
-- moved to another replica is not marked gone by the one it left. Other
-- replicas show the agent connected while this is 0 and last_seen_at is
-- recent; a replica that died without recording the end leaves only the
-- last-seen window to close.
ALTER TABLE agents ADD COLUMN disconnected_at INTEGER NOT NULL DEFAULT 0;

-- A release's installs by state (and wave): what its engine records at
-- each pass (the running ones) and what its counts read, without a visit
-- of every install's row.
CREATE INDEX release_installs_state ON release_installs (release_id, state, wave);

-- +goose Down
DROP INDEX release_installs_state;
ALTER TABLE agents DROP COLUMN disconnected_at;
