ALTER TABLE mounts DROP COLUMN association_started_at;
