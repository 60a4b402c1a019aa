-- When a mount's grants were last revoked: a restricted token issued before
-- it may neither query the mount's commands nor create grants on it
-- (CONTRACT §21). 0: never.
ALTER TABLE mount_revocations ADD COLUMN revoked_at BIGINT NOT NULL DEFAULT 0;
