-- +goose Up
-- What a plan (or drift check) job found to change, as its agent reported
-- it: a JSON array of {address, action, before, after, summary}; '' for
-- none.
ALTER TABLE jobs ADD COLUMN plan TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE jobs DROP COLUMN plan;
