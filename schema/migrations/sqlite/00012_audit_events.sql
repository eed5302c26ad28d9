-- +goose Up
-- Audit events: append-only, hash-chained per install (chain = install id)
-- plus one vendor-wide chain (chain = ''). hash is auditchain.Hash of the
-- row, prev the hash of the chain's record before it. The triggers refuse
-- every UPDATE and DELETE, so only someone who drops them first (file
-- access) can change a record, and `byoc audit verify` then names it.
-- A rowid table (rows appended in order) with the primary key's index
-- beside it, not WITHOUT ROWID: with a thousand chains growing at once,
-- whole rows keyed by chain scatter every batch's inserts over pages
-- that no longer fit the cache (imsd CPU per dispatched job 295 µs
-- against 221 µs; docs/performance.md).
CREATE TABLE audit_events (
    chain   TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    actor   TEXT    NOT NULL,
    subject TEXT    NOT NULL,
    data    TEXT    NOT NULL,
    prev    TEXT    NOT NULL,
    hash    TEXT    NOT NULL,
    PRIMARY KEY (chain, seq)
);

-- By time, for --since and the console's live view (newest first):
-- appended at its end, since events arrive in about time order.
CREATE INDEX audit_events_at ON audit_events (at);

-- +goose StatementBegin
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER audit_events_no_delete;
DROP TRIGGER audit_events_no_update;
DROP TABLE audit_events;
