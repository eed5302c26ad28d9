-- +goose Up
-- What an import job (byoc component import) makes the install's
-- component once it succeeds: the rendered config and its digest, as an
-- apply records them in install_components. One row per import job.
CREATE TABLE component_imports (
    job_id         TEXT PRIMARY KEY,
    install_id     TEXT NOT NULL REFERENCES installs (id),
    name           TEXT NOT NULL,
    component_type TEXT NOT NULL,
    digest         TEXT NOT NULL,
    config         TEXT NOT NULL,
    needs          TEXT NOT NULL DEFAULT '[]',
    app_revision   BIGINT NOT NULL,
    import_id      TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);

-- +goose Down
DROP TABLE component_imports;
