-- +goose Up
-- What a job's policies said of its plan, as its agent reported it: a JSON
-- array of {policy, source, level, message}; '' for none.
ALTER TABLE jobs ADD COLUMN policy TEXT NOT NULL DEFAULT '';

-- Drift checks per install component: the latest schedule tick fired (and
-- the job it queued), and the latest result (status '' until one arrived,
-- then in_sync, drifted or failed, with what differs as a JSON array of
-- planned changes).
CREATE TABLE install_drift (
    install_id     TEXT NOT NULL REFERENCES installs (id),
    component      TEXT NOT NULL,
    tick_at        BIGINT NOT NULL DEFAULT 0,
    tick_job_id    TEXT NOT NULL DEFAULT '',
    checked_at     BIGINT NOT NULL DEFAULT 0,
    job_id         TEXT NOT NULL DEFAULT '',
    status         TEXT NOT NULL DEFAULT '',
    error          TEXT NOT NULL DEFAULT '',
    changes        TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (install_id, component)
);

-- +goose Down
DROP TABLE install_drift;
ALTER TABLE jobs DROP COLUMN policy;
