-- +goose Up
-- What an agent running from an install stack reports of it (JSON, '' for
-- nothing): the customer-provided inputs (a value, or "set" for a
-- sensitive one; never a sensitive value) and the stack's outputs.
ALTER TABLE agents ADD COLUMN stack TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE agents DROP COLUMN stack;
