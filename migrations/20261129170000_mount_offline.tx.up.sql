-- What a phone last told of a mount's offline access (CONTRACT §21,
-- Mount.offline): the revocation version, log size and trusted-time flag
-- the mount's info showed, and the server's time of that upload. NULL
-- offline_at: nothing told during the current association.
ALTER TABLE mounts ADD COLUMN offline_revocation_version BIGINT;
--bun:split
ALTER TABLE mounts ADD COLUMN offline_log_pending INTEGER;
--bun:split
ALTER TABLE mounts ADD COLUMN offline_time_trusted BOOLEAN;
--bun:split
ALTER TABLE mounts ADD COLUMN offline_at BIGINT;
