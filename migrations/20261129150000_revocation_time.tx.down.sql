ALTER TABLE mount_revocations DROP COLUMN revoked_at;
