-- The device keys a mount uid had before its current one (CONTRACT §21: an
-- offline receipt is stored when it verifies with a device key pinned for
-- the mount in any association). A key is kept when a claim may replace it
-- and when the mount's record is deleted; like mount_revocations it is
-- keyed by the uid and outlives the record.
CREATE TABLE mount_device_keys (
    mount_uid  TEXT NOT NULL,
    device_key TEXT NOT NULL,
    kept_at BIGINT NOT NULL,
    PRIMARY KEY (mount_uid, device_key)
);
