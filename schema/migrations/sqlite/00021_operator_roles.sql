-- +goose Up
-- Operator roles (issue 28): four roles, each token's grant scoped to
-- every install (scope ''), one install (install:NAME), one app
-- (app:NAME) or a label selector (selector:SEL); tokens may expire, and
-- record when they were last used and who created them. SQLite cannot
-- change a CHECK, so the table is rebuilt.
CREATE TABLE api_tokens_new (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role = 'admin' OR role = 'viewer' OR role = 'operator' OR role = 'support'),
    hash         TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER NOT NULL DEFAULT 0,
    scope        TEXT NOT NULL DEFAULT '',
    expires_at   INTEGER NOT NULL DEFAULT 0,
    last_used_at INTEGER NOT NULL DEFAULT 0,
    created_by   TEXT NOT NULL DEFAULT ''
) STRICT;
INSERT INTO api_tokens_new (id, name, role, hash, created_at, revoked_at)
    SELECT id, name, role, hash, created_at, revoked_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_new RENAME TO api_tokens;

-- +goose Down
DELETE FROM api_tokens WHERE role = 'operator' OR role = 'support';
CREATE TABLE api_tokens_old (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    role       TEXT NOT NULL CHECK (role IN ('admin', 'viewer')),
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO api_tokens_old SELECT id, name, role, hash, created_at, revoked_at FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_old RENAME TO api_tokens;
