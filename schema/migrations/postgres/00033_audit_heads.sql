-- +goose Up
-- byoc_audit_heads locks the audit chains given (a transaction-scoped
-- advisory lock each, in the array's order, as a write of its own locks
-- them) and then returns each chain's head: its last seq and hash, NULL
-- for an empty chain. One round trip where imsd's group commit sent two,
-- which a single statement could not merge: a statement's snapshot is
-- taken before it runs, so a head read in the statement that took the
-- lock could miss a record another transaction committed while this one
-- waited for the lock. A VOLATILE function's every query takes a fresh
-- snapshot, so the heads are read after the locks are held
-- (docs/performance-postgres.md). SQLite's version 33 changes nothing.
-- +goose StatementBegin
CREATE FUNCTION byoc_audit_heads(chains TEXT[]) RETURNS TABLE (chain TEXT, seq BIGINT, hash TEXT)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
	PERFORM pg_advisory_xact_lock(7355608, hashtext(c)) FROM unnest(chains) AS c;
	RETURN QUERY SELECT c, h.seq, h.hash FROM unnest(chains) AS c
		LEFT JOIN LATERAL (SELECT e.seq, e.hash FROM audit_events e WHERE e.chain = c ORDER BY e.seq DESC LIMIT 1) h ON TRUE;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION byoc_audit_heads(TEXT[]);
