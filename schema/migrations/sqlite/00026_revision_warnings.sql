-- +goose Up
-- What imsd's check of a revision found worth saying that let it through
-- (a field its type's schema marks deprecated): a JSON array of
-- "file:line: key: message" strings, '' for none. Shown by app push,
-- app revisions and the console's revisions view.
ALTER TABLE app_revisions ADD COLUMN warnings TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE app_revisions DROP COLUMN warnings;
