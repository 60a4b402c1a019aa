ALTER TABLE commands DROP COLUMN job_id;
--bun:split
DROP TABLE job_targets;
--bun:split
DROP TABLE jobs;
