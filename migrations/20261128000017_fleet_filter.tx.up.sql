-- Fleet filter (docs/api.md, "Fleet filter"). A comparison on a latest
-- value selects the account's rows of one code in the value's order: the
-- expression must be written as the store writes it, CAST(value AS
-- DOUBLE PRECISION) in PostgreSQL and CAST(value AS REAL) in SQLite.
CREATE INDEX mount_latest_states_filter ON mount_latest_states (account_id, code, {{if .Postgres}}(CAST(value AS DOUBLE PRECISION)){{else}}CAST(value AS REAL){{end}});
--bun:split
-- lastSeenAt ranges and presence, within an account.
CREATE INDEX mounts_owner_last_seen ON mounts (owner_account_id, last_seen_at);
--bun:split
-- The most common narrowing of a fleet: its model.
CREATE INDEX mounts_owner_model ON mounts (owner_account_id, model_number);
