-- +goose Up
-- The name of the install's component a job is for (a workflow step's
-- component; '' for a job of no component, such as an action run). The
-- agent keeps each component's state directory by this name.
ALTER TABLE jobs ADD COLUMN component TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE jobs DROP COLUMN component;
