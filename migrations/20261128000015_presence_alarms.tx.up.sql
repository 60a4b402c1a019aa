-- Presence and alarms. A mount remembers when its current association was
-- last heard (server time, Unix ms) and whether MOUNT_OFFLINE was appended
-- for the lapse of that instant; the sweep reads the lapses not announced.
ALTER TABLE mounts ADD COLUMN last_seen_at BIGINT;
--bun:split
ALTER TABLE mounts ADD COLUMN offline_announced BOOLEAN NOT NULL DEFAULT FALSE;
--bun:split
CREATE INDEX mounts_unannounced_lapse ON mounts (last_seen_at) WHERE last_seen_at IS NOT NULL AND NOT offline_announced;
--bun:split
-- An account's alarm rules; conditions and mount_uids are JSON arrays.
-- revision counts the changes that restart the rule's evaluation.
CREATE TABLE alarm_rules (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    severity TEXT NOT NULL,
    conditions TEXT NOT NULL,
    for_seconds INTEGER NOT NULL,
    mount_uids TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    revision INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
--bun:split
CREATE INDEX alarm_rules_account ON alarm_rules (account_id, created_at, id);
--bun:split
-- Alarms and the episodes that may become one: PENDING (the conditions
-- hold since `since`, not yet for the rule's forSeconds: due at due_at),
-- ACTIVE, CLEARED. At most one open (PENDING or ACTIVE) per rule and mount,
-- whichever replica evaluates. A rule's deletion keeps its cleared alarms.
CREATE TABLE alarms (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    rule_name TEXT NOT NULL,
    rule_revision INTEGER NOT NULL,
    mount_uid TEXT NOT NULL,
    severity TEXT NOT NULL,
    state TEXT NOT NULL,
    since BIGINT NOT NULL,
    due_at BIGINT NOT NULL,
    raised_at BIGINT,
    cleared_at BIGINT,
    acknowledged_at BIGINT,
    acknowledged_by TEXT,
    alarm_values TEXT
);
--bun:split
CREATE UNIQUE INDEX alarms_open ON alarms (rule_id, mount_uid) WHERE state IN ('PENDING', 'ACTIVE');
--bun:split
CREATE INDEX alarms_open_mount ON alarms (mount_uid) WHERE state IN ('PENDING', 'ACTIVE');
--bun:split
CREATE INDEX alarms_due ON alarms (due_at) WHERE state = 'PENDING';
--bun:split
CREATE INDEX alarms_account_raised ON alarms (account_id, raised_at, id) WHERE state <> 'PENDING';
--bun:split
-- Retention deletes CLEARED alarms by cleared_at.
CREATE INDEX alarms_cleared ON alarms (cleared_at) WHERE state = 'CLEARED';
