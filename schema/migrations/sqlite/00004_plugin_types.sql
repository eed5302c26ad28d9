-- +goose Up
-- The registry of third-party component types: per type, the latest
-- description its plugin printed (byoc-plugin-TYPE describe, registered
-- with byoc plugin register), whose config schema app pushes check
-- component config against. Built-in types are never stored here.
CREATE TABLE plugin_types (
    type          TEXT PRIMARY KEY,
    version       TEXT NOT NULL,
    protocol      TEXT NOT NULL,
    -- description is the describe JSON (the fields imsd knows, compacted);
    -- config_schema is its config_schema ('' when the type declares none).
    description   TEXT NOT NULL,
    config_schema TEXT NOT NULL DEFAULT '',
    registered_at INTEGER NOT NULL,
    registered_by TEXT NOT NULL DEFAULT ''
) STRICT;

-- +goose Down
DROP TABLE plugin_types;
