-- +goose Up
-- jobs_state_lease indexed every job by state, and each change of a
-- job's state added an entry to it, the last one (succeeded, what almost
-- every job ends as) included, so it grew with the jobs table forever.
-- Nothing looks succeeded jobs up by state alone (a listing of them
-- walks jobs_created, newest first): the lease sweeper and the fleet's
-- counts read live jobs, and a listing by a rarer state (failed,
-- cancelled, timed out) still finds them here. A job that succeeds
-- adds no entry to it (docs/performance-postgres.md). SQLite keeps
-- jobs_state_lease: its planner uses a partial index only when the
-- query repeats the index's condition, and its version 32 changes
-- nothing.
DROP INDEX jobs_state_lease;
CREATE INDEX jobs_state_unsucceeded ON jobs (state, lease_deadline) WHERE state <> 'succeeded';

-- +goose Down
DROP INDEX jobs_state_unsucceeded;
CREATE INDEX jobs_state_lease ON jobs (state, lease_deadline);
