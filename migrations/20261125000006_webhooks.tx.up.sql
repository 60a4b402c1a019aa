-- Webhooks (docs/api.md, "Webhooks"): endpoints of an account, and one row
-- per delivery attempt. A PENDING attempt is claimed with a lease, so that
-- each attempt is made by one replica and one that dies mid-attempt hands
-- it on when the lease lapses. webhook_dispatch holds the position in the
-- event log up to which events have been turned into deliveries; moving it
-- in the transaction that stores them plans each event exactly once.
CREATE TABLE webhooks (
    id            TEXT PRIMARY KEY,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    url           TEXT NOT NULL,
    event_types   TEXT NOT NULL,
    mount_uids    TEXT NOT NULL,
    description   TEXT NOT NULL,
    enabled       BOOLEAN NOT NULL,
    sealed_secret TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
--bun:split
CREATE INDEX webhooks_account ON webhooks (account_id, created_at);
--bun:split
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    account_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    status          TEXT NOT NULL,
    response_status INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    duration_ms     BIGINT NOT NULL DEFAULT 0,
    attempted_at    BIGINT,
    next_attempt_at BIGINT,
    lease           TEXT,
    lease_until     BIGINT,
    payload         TEXT NOT NULL{{if .Postgres}},
    -- The order attempts were stored in (SQLite has its rowid).
    seq             BIGINT GENERATED ALWAYS AS IDENTITY{{end}}
);
--bun:split
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'PENDING';
--bun:split
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id{{if .Postgres}}, seq DESC{{end}});
--bun:split
CREATE TABLE webhook_dispatch (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    tx        {{if .Postgres}}xid8{{else}}INTEGER{{end}} NOT NULL,
    id        BIGINT NOT NULL
);
--bun:split
INSERT INTO webhook_dispatch (singleton, tx, id) VALUES (1, {{if .Postgres}}'0'::xid8{{else}}0{{end}}, 0);
