-- +goose Up
-- A job's ack (assigned -> running) and every lease renewal rewrote its
-- row with a new entry in each of the five indexes of jobs, because two
-- of them named columns those writes change: jobs_queued's condition
-- named state, and jobs_state_unsucceeded indexed state and
-- lease_deadline. PostgreSQL updates a row in place, without touching
-- its indexes (a HOT update), only when no column an index names
-- changes and the row's page has room for the new version.
--
-- phase is the state as the indexes need it: assigned and running are
-- one phase, held, so the ack does not change it; the lease deadline is
-- no longer indexed (the sweeper reads the held jobs, as it already read
-- every running job for their timeouts). The indexes that named state
-- name phase instead, and the queries on them say both (the store adds
-- the phase condition on PostgreSQL). fillfactor 50 leaves each page of
-- new jobs room for each job's ack in place: at 80 or 90 most acks
-- still found their page full (measured: docs/performance-river.md).
-- Adding a stored column rewrites the table once, under an exclusive
-- lock: on a large jobs table the migration takes a while.
ALTER TABLE jobs ADD COLUMN phase TEXT NOT NULL
	GENERATED ALWAYS AS (CASE WHEN state IN ('assigned', 'running') THEN 'held' ELSE state END) STORED;
DROP INDEX jobs_queued;
CREATE INDEX jobs_queued ON jobs (install_id, created_at, id) WHERE phase = 'queued';
DROP INDEX jobs_state_unsucceeded;
CREATE INDEX jobs_phase ON jobs (phase, created_at, id) WHERE phase <> 'succeeded';
ALTER TABLE jobs SET (fillfactor = 50);

-- +goose Down
ALTER TABLE jobs RESET (fillfactor);
DROP INDEX jobs_phase;
DROP INDEX jobs_queued;
CREATE INDEX jobs_queued ON jobs (install_id, created_at, id) WHERE state = 'queued';
CREATE INDEX jobs_state_unsucceeded ON jobs (state, lease_deadline) WHERE state <> 'succeeded';
ALTER TABLE jobs DROP COLUMN phase;
