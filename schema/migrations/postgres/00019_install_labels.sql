-- +goose Up
-- An install's labels (key=value, as Kubernetes validates them), a JSON
-- object with sorted keys; selectors (tier=canary, region in (eu,us)) pick
-- installs by them.
ALTER TABLE installs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE installs DROP COLUMN labels;
