-- +goose Up
-- A job's log is capped (imsd --job-log-max-lines, --job-log-max-bytes):
-- log_lines and log_bytes count the lines stored of the job, all attempts
-- together, kept in the same transaction as the lines. A job running at
-- the upgrade starts from what it has stored.
ALTER TABLE jobs ADD COLUMN log_lines INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN log_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET
    log_lines = (SELECT COUNT(*) FROM job_logs l WHERE l.job_id = jobs.id),
    log_bytes = (SELECT COALESCE(SUM(LENGTH(CAST(l.text AS BLOB))), 0) FROM job_logs l WHERE l.job_id = jobs.id)
WHERE state IN ('queued', 'assigned', 'running');

-- Past the cap, an attempt's lines are dropped and counted here; one
-- marker line (stream 3, at seq, the first line dropped) says so.
-- last_seq is the highest seq counted, so a batch sent again after a
-- reconnect is not counted twice. jobs.log_cut_attempt is the last
-- attempt cut: none of its later lines is stored, even one that would
-- fit, so the marker stays the attempt's last line.
ALTER TABLE jobs ADD COLUMN log_cut_attempt INTEGER NOT NULL DEFAULT 0;
CREATE TABLE job_log_cuts (
    job_id   TEXT NOT NULL REFERENCES jobs (id),
    attempt  INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    lines    INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt)
) STRICT;

-- The log retention (imsd --job-log-retention) removes the lines of jobs
-- that ended long enough ago; logs_pruned_at is when it did (0 = not
-- yet). The index holds the ended jobs not yet pruned, oldest first.
ALTER TABLE jobs ADD COLUMN logs_pruned_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_logs_unpruned ON jobs (ended_at) WHERE logs_pruned_at = 0 AND ended_at > 0;

-- +goose Down
DROP INDEX jobs_logs_unpruned;
ALTER TABLE jobs DROP COLUMN logs_pruned_at;
DROP TABLE job_log_cuts;
ALTER TABLE jobs DROP COLUMN log_cut_attempt;
ALTER TABLE jobs DROP COLUMN log_bytes;
ALTER TABLE jobs DROP COLUMN log_lines;
