ALTER TABLE mount_latest_states DROP COLUMN verified;
--bun:split
ALTER TABLE mount_states DROP COLUMN verified;
--bun:split
ALTER TABLE mounts DROP COLUMN device_public_key;
--bun:split
DROP INDEX commands_issued_expiry;
--bun:split
ALTER TABLE commands DROP COLUMN receipt_counter;
--bun:split
ALTER TABLE commands DROP COLUMN expires_at;
--bun:split
ALTER TABLE commands DROP COLUMN verified;
--bun:split
ALTER TABLE commands DROP COLUMN reason;
--bun:split
ALTER TABLE commands DROP COLUMN status_at;
--bun:split
ALTER TABLE commands DROP COLUMN status;
