-- +goose Up
-- Artifact custody. A build is an artifact the build agent synced or
-- packaged into the vendor registry: its lineage record, written with the
-- build job's success (id is the job's id).
CREATE TABLE builds (
    id            TEXT PRIMARY KEY,
    repository    TEXT NOT NULL,
    digest        TEXT NOT NULL,
    size          INTEGER NOT NULL DEFAULT 0,
    media_type    TEXT NOT NULL DEFAULT '',
    kind          TEXT NOT NULL,
    source        TEXT NOT NULL,
    source_digest TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL
);
CREATE INDEX builds_digest ON builds (repository, digest);
CREATE INDEX builds_created ON builds (created_at, id);

-- A one-time registry grant handed to an agent with a job (hash of its
-- secret only): exchanged at most once (used_at), before expires_at, by
-- an agent of install_id, for at most scopes (space-separated).
CREATE TABLE registry_grants (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL,
    install_id TEXT NOT NULL REFERENCES installs (id),
    job_id     TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    scopes     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at    INTEGER NOT NULL DEFAULT 0,
    used_by    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX registry_grants_expires ON registry_grants (expires_at);

-- +goose Down
DROP TABLE registry_grants;
DROP TABLE builds;
