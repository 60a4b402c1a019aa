-- What an association produced (state history, latest values, command audit
-- order) belongs to the account that owned the mount at the time: a mount
-- that changes hands must not show or sign its former owner's data. States
-- gain account_id in their keys; rows written before this migration go to
-- the mount's current (or last) owner, the best the old schema can tell.
-- The tables are rebuilt rather than altered: SQLite cannot change a
-- primary key in place.
CREATE TABLE mount_states_v4 (
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    account_id  TEXT NOT NULL,
    code        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    value       TEXT {{if .Postgres}}COLLATE "C" {{end}}NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (mount_uid, account_id, code, occurred_at, value)
);
--bun:split
INSERT INTO mount_states_v4 (mount_uid, account_id, code, occurred_at, value, received_at)
SELECT s.mount_uid, COALESCE(m.owner_account_id, m.expired_owner_id, ''), s.code, s.occurred_at, s.value, s.received_at
FROM mount_states s JOIN mounts m ON m.uid = s.mount_uid;
--bun:split
DROP TABLE mount_states;
--bun:split
ALTER TABLE mount_states_v4 RENAME TO mount_states;
--bun:split
CREATE INDEX mount_states_history ON mount_states (mount_uid, account_id, occurred_at DESC);
--bun:split
CREATE TABLE mount_latest_states_v4 (
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    account_id  TEXT NOT NULL,
    code        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    value       TEXT {{if .Postgres}}COLLATE "C" {{end}}NOT NULL,
    PRIMARY KEY (mount_uid, account_id, code)
);
--bun:split
INSERT INTO mount_latest_states_v4 (mount_uid, account_id, code, occurred_at, value)
SELECT l.mount_uid, COALESCE(m.owner_account_id, m.expired_owner_id, ''), l.code, l.occurred_at, l.value
FROM mount_latest_states l JOIN mounts m ON m.uid = l.mount_uid;
--bun:split
DROP TABLE mount_latest_states;
--bun:split
ALTER TABLE mount_latest_states_v4 RENAME TO mount_latest_states;
--bun:split
-- Commands of one millisecond keep the order they were issued in: seq is
-- assigned at insert and breaks ties in the audit.
CREATE TABLE commands_v4 (
    seq           {{if .Postgres}}BIGSERIAL PRIMARY KEY{{else}}INTEGER PRIMARY KEY AUTOINCREMENT{{end}},
    id            TEXT NOT NULL UNIQUE,
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
INSERT INTO commands_v4 (id, mount_uid, account_id, code, payload, signed_token, data, generated_at, issued_by)
SELECT id, mount_uid, account_id, code, payload, signed_token, data, generated_at, issued_by
FROM commands ORDER BY generated_at, id;
--bun:split
DROP TABLE commands;
--bun:split
ALTER TABLE commands_v4 RENAME TO commands;
--bun:split
CREATE INDEX commands_mount ON commands (mount_uid, account_id, generated_at DESC, seq DESC);
--bun:split
-- Tag links belong to the association too: drop those left behind by an
-- abandon or expiry, or made by an account that no longer owns the mount.
DELETE FROM nfc_tag_mounts WHERE NOT EXISTS (
    SELECT 1 FROM mounts m WHERE m.uid = nfc_tag_mounts.mount_uid
      AND m.owner_account_id = nfc_tag_mounts.account_id AND m.association_state <> 'INACTIVE');
