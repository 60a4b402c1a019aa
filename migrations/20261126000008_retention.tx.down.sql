DROP INDEX refresh_tokens_expires;
--bun:split
DROP INDEX webhook_deliveries_finished;
--bun:split
{{if .Postgres}}
CREATE TABLE mount_states_plain (
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    account_id  TEXT NOT NULL,
    code        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    value       TEXT COLLATE "C" NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (mount_uid, account_id, code, occurred_at, value)
);
--bun:split
INSERT INTO mount_states_plain SELECT mount_uid, account_id, code, occurred_at, value, received_at FROM mount_states;
--bun:split
DROP TABLE mount_states;
--bun:split
ALTER TABLE mount_states_plain RENAME TO mount_states;
--bun:split
CREATE INDEX mount_states_history ON mount_states (mount_uid, account_id, occurred_at DESC);
{{else}}
DROP INDEX mount_states_occurred;
{{end}}
