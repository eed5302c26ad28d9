-- +goose Up
-- byoc_audit_lock_heads locks the audit chains of lock_chains (sorted:
-- a transaction-scoped advisory lock each, in order, as
-- byoc_audit_heads does) and then returns the heads of read_chains, a
-- subset: the group commit reads only the heads its cache does not hold
-- (imsd/store/pgheads.go) yet locks every chain it appends to in one
-- order, so that two replicas never wait on each other in a cycle. The
-- heads are read after the locks are held (a VOLATILE function's every
-- query takes a fresh snapshot). SQLite's version 35 changes nothing.
-- +goose StatementBegin
CREATE FUNCTION byoc_audit_lock_heads(lock_chains TEXT[], read_chains TEXT[]) RETURNS TABLE (chain TEXT, seq BIGINT, hash TEXT)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
	PERFORM pg_advisory_xact_lock(7355608, hashtext(c)) FROM unnest(lock_chains) AS c;
	RETURN QUERY SELECT c, h.seq, h.hash FROM unnest(read_chains) AS c
		LEFT JOIN LATERAL (SELECT e.seq, e.hash FROM audit_events e WHERE e.chain = c ORDER BY e.seq DESC LIMIT 1) h ON TRUE;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION byoc_audit_lock_heads(TEXT[], TEXT[]);
