-- +goose Up
-- A job's state changes three times in its life (assigned, running, ended)
-- and each change rewrote its entry in jobs_install_state, an index led by
-- the install, so on a busy fleet every change dirtied a random page. Now
-- only queued jobs are indexed by install and state (what claims read),
-- and listings by install use an index whose entry never changes.
DROP INDEX jobs_install_state;
CREATE INDEX jobs_queued ON jobs (install_id, created_at, id) WHERE state = 'queued';
CREATE INDEX jobs_install_created ON jobs (install_id, created_at, id);

-- +goose Down
DROP INDEX jobs_install_created;
DROP INDEX jobs_queued;
CREATE INDEX jobs_install_state ON jobs (install_id, state, created_at, id);
