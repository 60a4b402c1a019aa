-- Retention. On PostgreSQL the state history is partitioned by occurred_at
-- (one partition per UTC day, created ahead by the service, dropped whole
-- past MOUNTD_STATE_RETENTION). The table as it is becomes the partition of
-- everything before the next UTC day, so no row is copied; it is emptied by
-- small deletes until its whole range is past retention, then dropped.
-- On SQLite old rows are deleted in small batches, by occurred_at.
{{if .Postgres}}
ALTER TABLE mount_states RENAME TO mount_states_before;
--bun:split
ALTER INDEX mount_states_history RENAME TO mount_states_before_history;
--bun:split
CREATE TABLE mount_states (
    mount_uid   TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE,
    account_id  TEXT NOT NULL,
    code        TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    value       TEXT COLLATE "C" NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (mount_uid, account_id, code, occurred_at, value)
) PARTITION BY RANGE (occurred_at);
--bun:split
CREATE INDEX mount_states_history ON mount_states (mount_uid, account_id, occurred_at DESC);
--bun:split
DO $$
DECLARE bound BIGINT;
BEGIN
    SELECT (GREATEST(COALESCE(MAX(occurred_at), 0), (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT) / 86400000 + 1) * 86400000
      INTO bound FROM mount_states_before;
    EXECUTE format('ALTER TABLE mount_states ATTACH PARTITION mount_states_before FOR VALUES FROM (MINVALUE) TO (%s)', bound);
END $$;
--bun:split
CREATE INDEX mount_states_before_occurred ON mount_states_before (occurred_at);
{{else}}
CREATE INDEX mount_states_occurred ON mount_states (occurred_at);
{{end}}
--bun:split
-- Finished webhook attempts are deleted past MOUNTD_WEBHOOK_DELIVERY_RETENTION.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (attempted_at) WHERE status <> 'PENDING';
--bun:split
CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at);
