-- The truth from the mount. A command's id becomes its payload's nonce
-- (the last 32 characters of the payload), which the mount's receipts name;
-- the unique index on id serves GET /mounts/{uid}/commands/{id}. Every
-- command gets a lifecycle: status (ISSUED, EXECUTED, REFUSED, UNCONFIRMED)
-- since status_at (the server's time), the mount's reason for REFUSED,
-- verified when the deciding receipt was signed, the deciding receipt's
-- counter, and expires_at (generated_at + MOUNTD_COMMAND_TTL). Commands
-- issued before this version count as UNCONFIRMED from their expiry, with
-- no event. Mounts pin their own device key; state entries say whether
-- the mount signed them.
ALTER TABLE commands ADD COLUMN status TEXT NOT NULL DEFAULT 'ISSUED';
--bun:split
ALTER TABLE commands ADD COLUMN status_at BIGINT NOT NULL DEFAULT 0;
--bun:split
ALTER TABLE commands ADD COLUMN reason TEXT NOT NULL DEFAULT '';
--bun:split
ALTER TABLE commands ADD COLUMN verified BOOLEAN NOT NULL DEFAULT FALSE;
--bun:split
ALTER TABLE commands ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0;
--bun:split
ALTER TABLE commands ADD COLUMN receipt_counter BIGINT;
--bun:split
UPDATE commands SET id = substr(payload, length(payload) - 31),
    status = 'UNCONFIRMED', expires_at = generated_at + 300000, status_at = generated_at + 300000;
--bun:split
-- The sweep that turns expired commands UNCONFIRMED reads only ISSUED ones.
CREATE INDEX commands_issued_expiry ON commands (expires_at) WHERE status = 'ISSUED';
--bun:split
ALTER TABLE mounts ADD COLUMN device_public_key TEXT;
--bun:split
ALTER TABLE mount_states ADD COLUMN verified BOOLEAN NOT NULL DEFAULT FALSE;
--bun:split
ALTER TABLE mount_latest_states ADD COLUMN verified BOOLEAN NOT NULL DEFAULT FALSE;
