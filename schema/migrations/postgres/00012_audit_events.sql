-- +goose Up
-- Audit events: append-only, hash-chained per install (chain = install id)
-- plus one vendor-wide chain (chain = ''). hash is auditchain.Hash of the
-- row, prev the hash of the chain's record before it. The triggers refuse
-- every UPDATE, DELETE and TRUNCATE, so only someone who drops them first
-- can change a record, and `byoc audit verify` then names it.
CREATE TABLE audit_events (
    chain   TEXT   NOT NULL,
    seq     BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    kind    TEXT   NOT NULL,
    actor   TEXT   NOT NULL,
    subject TEXT   NOT NULL,
    data    TEXT   NOT NULL,
    prev    TEXT   NOT NULL,
    hash    TEXT   NOT NULL,
    PRIMARY KEY (chain, seq)
);

-- By time, for --since and the console's live view (newest first):
-- appended at its end, since events arrive in about time order.
CREATE INDEX audit_events_at ON audit_events (at);

-- +goose StatementBegin
CREATE FUNCTION audit_events_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only';
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER audit_events_no_update BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

-- +goose Down
DROP TABLE audit_events;
DROP FUNCTION audit_events_append_only();
