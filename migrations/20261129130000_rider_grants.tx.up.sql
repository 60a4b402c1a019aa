-- Offline access (CONTRACT §21): grants that let a rider's phone release a
-- helmet with no network, signed by the association's owner key, and each
-- mount's revocation version and epoch. mount_revocations is keyed by the
-- uid alone and outlives the mount's record, its associations and their
-- accounts: a mount's version and epoch never go back (each rise sets them
-- to max(previous + 1, the time in ms), so a restored database moves on
-- past what mounts saw).
CREATE TABLE rider_grants (
    id            TEXT PRIMARY KEY,
    mount_uid     TEXT NOT NULL,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    rider_key     TEXT NOT NULL,
    rights        TEXT NOT NULL,
    not_before    BIGINT NOT NULL,
    not_after     BIGINT NOT NULL,
    epoch         BIGINT NOT NULL,
    label         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    created_by    TEXT NOT NULL,
    token_id      TEXT NOT NULL,
    -- The owner key that signed text; a new key of the same association
    -- signs the grant again.
    key_id        TEXT NOT NULL,
    text          TEXT NOT NULL,
    signature     TEXT NOT NULL,
    revoked_at    BIGINT,
    -- The mount's epoch when the grant was revoked: the signed list holds
    -- the revocations of the current epoch whose not_after has not passed.
    revoked_epoch BIGINT,
    uses          INTEGER NOT NULL DEFAULT 0,
    last_used_at  BIGINT
);
--bun:split
CREATE INDEX rider_grants_mount ON rider_grants (mount_uid, created_at);
--bun:split
CREATE INDEX rider_grants_rider ON rider_grants (account_id, rider_key, created_at);
--bun:split
CREATE TABLE mount_revocations (
    uid     TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    epoch   BIGINT NOT NULL
);
