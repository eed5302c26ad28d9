-- +goose Up
-- Approved plans. A job's plan_digest is the digest of the plan it made
-- (as its agent computed it); approved_plan_digest, on the apply of an
-- approved plan, the digest the approval bound (signed into the job). A
-- workflow step's plan_job_id is the job whose plan is the step's (a plan
-- job, or an apply that found its plan changed), plan_digest that plan's
-- digest once it is in, and approved_plan_digest what the approval bound.
ALTER TABLE jobs ADD COLUMN plan_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN approved_plan_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE workflow_steps ADD COLUMN plan_job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE workflow_steps ADD COLUMN plan_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE workflow_steps ADD COLUMN approved_plan_digest TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE workflow_steps DROP COLUMN approved_plan_digest;
ALTER TABLE workflow_steps DROP COLUMN plan_digest;
ALTER TABLE workflow_steps DROP COLUMN plan_job_id;
ALTER TABLE jobs DROP COLUMN approved_plan_digest;
ALTER TABLE jobs DROP COLUMN plan_digest;
