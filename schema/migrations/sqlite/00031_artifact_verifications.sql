-- +goose Up
-- What an install's agent last verified of each component's artifact
-- under the customer's supply-chain policy (agentd policy supply-chain),
-- as the job's result reported it: one row per install and component,
-- replaced by each later report.
CREATE TABLE artifact_verifications (
    install_id   TEXT NOT NULL REFERENCES installs (id),
    component    TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    artifact     TEXT NOT NULL,
    digest       TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    attestations TEXT NOT NULL DEFAULT '[]',
    verdict      TEXT NOT NULL,
    failed       TEXT NOT NULL DEFAULT '[]',
    verified_at  BIGINT NOT NULL,
    PRIMARY KEY (install_id, component)
);

-- +goose Down
DROP TABLE artifact_verifications;
