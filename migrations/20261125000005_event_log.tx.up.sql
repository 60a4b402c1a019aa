-- The event log (docs/api.md, "Event log"): every event is appended in the
-- transaction of the change that caused it. Its public order is (tx, id):
-- on PostgreSQL tx is the writing transaction's id, and readers return only
-- rows of transactions older than every transaction still in flight, so a
-- row that commits late can never fall behind a cursor already handed out.
-- SQLite has one writer at a time, so commit order is id order and tx is 0.
-- AUTOINCREMENT keeps SQLite from reusing the ids of pruned rows.
CREATE TABLE events (
    {{if .Postgres}}id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY{{else}}id INTEGER PRIMARY KEY AUTOINCREMENT{{end}},
    tx          {{if .Postgres}}xid8 NOT NULL DEFAULT pg_current_xact_id(){{else}}INTEGER NOT NULL DEFAULT 0{{end}},
    account_id  TEXT NOT NULL,
    type        TEXT NOT NULL,
    mount_uid   TEXT NOT NULL,
    occurred_at BIGINT NOT NULL,
    body        TEXT NOT NULL
);
--bun:split
CREATE INDEX events_account_position ON events (account_id, tx, id);
--bun:split
CREATE INDEX events_position ON events (tx, id);
--bun:split
CREATE INDEX events_occurred ON events (occurred_at);
--bun:split
-- The position of the newest pruned event: a cursor before it is expired.
CREATE TABLE event_horizon (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    tx          {{if .Postgres}}xid8{{else}}INTEGER{{end}} NOT NULL,
    id          BIGINT NOT NULL
);
--bun:split
INSERT INTO event_horizon (singleton, tx, id) VALUES (1, {{if .Postgres}}'0'::xid8{{else}}0{{end}}, 0);
