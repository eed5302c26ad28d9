-- +goose Up
-- The agent's own key rotation (agentd identity rotate): the next key the
-- agent announced in a hello authenticated by its current key (empty: no
-- rotation under way), accepted beside public_key until the agent's first
-- hello under it, which makes it public_key and refuses the old key; and
-- when the last rotation completed.
ALTER TABLE agents ADD COLUMN next_public_key BLOB NOT NULL DEFAULT x'';
ALTER TABLE agents ADD COLUMN key_rotated_at INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE agents DROP COLUMN key_rotated_at;
ALTER TABLE agents DROP COLUMN next_public_key;
