-- The audit log (docs/api.md, "Audit log"): who changed what, from where,
-- recorded in the transaction of the change. Its order is the event log's,
-- (tx, id): readers return only rows of transactions older than every one
-- still in flight, so a row that commits late never falls behind a cursor
-- handed out. account_id is NULL for changes to the installation
-- (accounts created, firmware, keys), which the API never lists.
CREATE TABLE audit_log (
    {{if .Postgres}}id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY{{else}}id INTEGER PRIMARY KEY AUTOINCREMENT{{end}},
    tx             {{if .Postgres}}xid8 NOT NULL DEFAULT pg_current_xact_id(){{else}}INTEGER NOT NULL DEFAULT 0{{end}},
    account_id     TEXT,
    at             BIGINT NOT NULL,
    actor_type     TEXT NOT NULL,
    actor_id       TEXT NOT NULL,
    actor_name     TEXT NOT NULL,
    action         TEXT NOT NULL,
    target         TEXT NOT NULL,
    source_address TEXT NOT NULL,
    details        TEXT NOT NULL
);
--bun:split
CREATE INDEX audit_log_account_position ON audit_log (account_id, tx, id);
--bun:split
CREATE INDEX audit_log_at ON audit_log (at);
