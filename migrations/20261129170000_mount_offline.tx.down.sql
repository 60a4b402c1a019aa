ALTER TABLE mounts DROP COLUMN offline_at;
--bun:split
ALTER TABLE mounts DROP COLUMN offline_time_trusted;
--bun:split
ALTER TABLE mounts DROP COLUMN offline_log_pending;
--bun:split
ALTER TABLE mounts DROP COLUMN offline_revocation_version;
