-- +goose Up
-- The plugin releases an agent's pin file names and what the agent
-- verified of each (its signature, digests and type), as the agent
-- reports them (JSON, '' for never reported).
ALTER TABLE agents ADD COLUMN plugin_report TEXT NOT NULL DEFAULT '';

-- Every verification an install's agents reported, newest kept (a
-- bounded number per component, or per agent and plugin type):
-- artifact_verifications keeps only each component's latest. A
-- component's artifact has agent_id ''; a plugin release the agent
-- pinned has component '' and its type as component_type.
CREATE TABLE artifact_verification_history (
    install_id     TEXT NOT NULL REFERENCES installs (id),
    component      TEXT NOT NULL,
    component_type TEXT NOT NULL DEFAULT '',
    agent_id       TEXT NOT NULL DEFAULT '',
    job_id         TEXT NOT NULL DEFAULT '',
    artifact       TEXT NOT NULL,
    digest         TEXT NOT NULL,
    version        TEXT NOT NULL DEFAULT '',
    key_id         TEXT NOT NULL DEFAULT '',
    attestations   TEXT NOT NULL DEFAULT '[]',
    verdict        TEXT NOT NULL,
    failed         TEXT NOT NULL DEFAULT '[]',
    verified_at    BIGINT NOT NULL
);
CREATE INDEX artifact_verification_history_by_install
    ON artifact_verification_history (install_id, component, component_type, agent_id, verified_at);

INSERT INTO artifact_verification_history (install_id, component, component_type, job_id, artifact, digest, key_id, attestations, verdict, failed, verified_at)
SELECT v.install_id, v.component, COALESCE(j.component_type, ''), v.job_id, v.artifact, v.digest, v.key_id, v.attestations, v.verdict, v.failed, v.verified_at
FROM artifact_verifications v LEFT JOIN jobs j ON j.id = v.job_id;

-- +goose Down
DROP TABLE artifact_verification_history;
ALTER TABLE agents DROP COLUMN plugin_report;
