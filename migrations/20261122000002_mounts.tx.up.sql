-- A mount row outlives its associations: abandon and expiry clear the owner
-- and key but keep the record and its history; only DELETE removes it.
CREATE TABLE IF NOT EXISTS mounts (
    uid                     TEXT PRIMARY KEY,
    name                    TEXT NOT NULL DEFAULT '',
    serial_number           TEXT NOT NULL DEFAULT '',
    mac_address             TEXT NOT NULL DEFAULT '',
    firmware_revision       TEXT NOT NULL DEFAULT '',
    software_revision       TEXT NOT NULL DEFAULT '',
    model_number            TEXT NOT NULL DEFAULT '',
    association_state       TEXT NOT NULL,
    owner_account_id        TEXT REFERENCES accounts (id) ON DELETE SET NULL,
    -- who lost the mount when its window lapsed, so that their late confirm
    -- answers 410 rather than 404
    expired_owner_id        TEXT,
    idle_deadline           BIGINT,
    associated_at           BIGINT,
    key_id                  TEXT,
    public_key              TEXT,
    sealed_private_key      TEXT,
    created_at              BIGINT NOT NULL,
    updated_at              BIGINT NOT NULL
);
--bun:split
CREATE INDEX IF NOT EXISTS mounts_owner ON mounts (owner_account_id, uid);
--bun:split
CREATE INDEX IF NOT EXISTS mounts_idle_deadline ON mounts (idle_deadline) WHERE association_state = 'IDLE';
--bun:split
-- The history of reported states. The primary key is the duplicate rule:
-- one entry per mount, code, instant and value.
CREATE TABLE IF NOT EXISTS mount_states (
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    code        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    value       TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (mount_uid, code, occurred_at, value)
);
--bun:split
CREATE INDEX IF NOT EXISTS mount_states_history ON mount_states (mount_uid, occurred_at DESC);
--bun:split
-- The latest entry per mount and code, the source of the computed fields.
CREATE TABLE IF NOT EXISTS mount_latest_states (
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    code        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (mount_uid, code)
);
--bun:split
-- Every command issued, as issued (the audit); never re-signed.
CREATE TABLE IF NOT EXISTS commands (
    id            TEXT PRIMARY KEY,
    mount_uid     TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    account_id    TEXT NOT NULL,
    code          TEXT NOT NULL,
    payload       TEXT NOT NULL,
    signed_token  TEXT,
    data          TEXT NOT NULL,
    generated_at  BIGINT NOT NULL,
    issued_by     TEXT NOT NULL
);
--bun:split
CREATE INDEX IF NOT EXISTS commands_mount ON commands (mount_uid, generated_at DESC);
--bun:split
CREATE TABLE IF NOT EXISTS nfc_tags (
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    uid         TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    color       TEXT NOT NULL DEFAULT '',
    icon_name   TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (account_id, uid)
);
--bun:split
CREATE TABLE IF NOT EXISTS nfc_tag_mounts (
    account_id  TEXT NOT NULL,
    tag_uid     TEXT NOT NULL,
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    linked_at   BIGINT NOT NULL,
    PRIMARY KEY (mount_uid, tag_uid),
    FOREIGN KEY (account_id, tag_uid) REFERENCES nfc_tags (account_id, uid) ON DELETE CASCADE
);
--bun:split
CREATE INDEX IF NOT EXISTS nfc_tag_mounts_tag ON nfc_tag_mounts (account_id, tag_uid);
--bun:split
CREATE TABLE IF NOT EXISTS firmware_versions (
    model_number      TEXT NOT NULL,
    software_revision TEXT NOT NULL,
    available_since   BIGINT NOT NULL,
    deprecated        BOOLEAN NOT NULL DEFAULT FALSE,
    mandatory         BOOLEAN NOT NULL DEFAULT FALSE,
    sha256            TEXT NOT NULL,
    size              BIGINT NOT NULL,
    blob_key          TEXT NOT NULL,
    created_at        BIGINT NOT NULL,
    PRIMARY KEY (model_number, software_revision)
);
--bun:split
CREATE INDEX IF NOT EXISTS firmware_versions_available ON firmware_versions (available_since DESC);
