-- +goose Up
-- An app revision is an immutable, validated snapshot of an app config:
-- every file of the config, as pushed. number counts up per app from 1.
CREATE TABLE app_revisions (
    app_id     TEXT NOT NULL REFERENCES apps (id),
    number     BIGINT NOT NULL,
    digest     TEXT NOT NULL,
    version    TEXT NOT NULL DEFAULT '',
    files      BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (app_id, number)
);

-- +goose Down
DROP TABLE app_revisions;
