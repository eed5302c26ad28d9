-- +goose Up
-- Operator roles (issue 28): four roles, each token's grant scoped to
-- every install (scope ''), one install (install:NAME), one app
-- (app:NAME) or a label selector (selector:SEL); tokens may expire, and
-- record when they were last used and who created them.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_role_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_role_check CHECK (role IN ('admin', 'viewer', 'operator', 'support'));
ALTER TABLE api_tokens ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_tokens ADD COLUMN last_used_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_tokens ADD COLUMN created_by TEXT NOT NULL DEFAULT '';

-- +goose Down
DELETE FROM api_tokens WHERE role IN ('operator', 'support');
ALTER TABLE api_tokens DROP COLUMN created_by;
ALTER TABLE api_tokens DROP COLUMN last_used_at;
ALTER TABLE api_tokens DROP COLUMN expires_at;
ALTER TABLE api_tokens DROP COLUMN scope;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_role_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_role_check CHECK (role IN ('admin', 'viewer'));
