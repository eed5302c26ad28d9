-- +goose Up
-- A window-bound job (one of a release) runs only while the install's
-- maintenance windows are open: imsd holds it until the vendor's and the
-- customer's are, and the agent refuses it outside the customer's. The
-- flag is part of the job's signature.
ALTER TABLE jobs ADD COLUMN window_bound INTEGER NOT NULL DEFAULT 0 CHECK (window_bound IN (0, 1));

-- +goose Down
ALTER TABLE jobs DROP COLUMN window_bound;
