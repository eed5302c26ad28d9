-- +goose Up
-- The idempotency keys of EnqueueJob and EnqueueJobs: a retried request
-- with a key already used returns the jobs the key's first request
-- stored (job_ids, in order, comma-separated) instead of storing them
-- again. request_hash is the SHA-256 of what the request asked for (the
-- method, the caller and the request without its key), so that the key
-- with another request is refused. A key is written in the transaction
-- that stores its jobs, so the two are stored together or not at all. Keys
-- are scoped to the vendor (this database); one past expires_at counts
-- as unused and is deleted by the sweeper.
CREATE TABLE enqueue_keys (
    key          TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    job_ids      TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX enqueue_keys_expires ON enqueue_keys (expires_at);

-- +goose Down
DROP TABLE enqueue_keys;
