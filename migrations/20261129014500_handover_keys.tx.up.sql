-- The owner keys a mount may hold (docs/api.md, "Commands"): every claim's
-- key pair, kept sealed as in mounts (AES-256-GCM under the master key, the
-- mount uid and key id as additional data), so that the next
-- ASSOCIATE_OWNER is signed by the key the mount holds, across accounts.
-- confirmed_at marks the last confirmed association's key; keys kept
-- before it are deleted at the confirmation. No foreign key to mounts: the
-- mount keeps its key when its record is deleted.
CREATE TABLE handover_keys (
    seq                {{if .Postgres}}BIGSERIAL PRIMARY KEY{{else}}INTEGER PRIMARY KEY AUTOINCREMENT{{end}},
    mount_uid          TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    public_key         TEXT NOT NULL,
    sealed_private_key TEXT NOT NULL,
    account_id         TEXT NOT NULL,
    created_at         BIGINT NOT NULL,
    confirmed_at       BIGINT
);
--bun:split
CREATE INDEX handover_keys_mount ON handover_keys (mount_uid, seq);
--bun:split
-- The keys mounts hold now: an ASSOCIATED mount's as confirmed, an IDLE
-- one's as claimed.
INSERT INTO handover_keys (mount_uid, key_id, public_key, sealed_private_key, account_id, created_at, confirmed_at)
SELECT uid, key_id, public_key, sealed_private_key, owner_account_id, updated_at,
    CASE WHEN association_state = 'ASSOCIATED' THEN COALESCE(associated_at, updated_at) END
FROM mounts WHERE key_id IS NOT NULL AND sealed_private_key IS NOT NULL AND owner_account_id IS NOT NULL;
