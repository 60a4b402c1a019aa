-- State values compare in byte order on both databases, as core.Newer and
-- the cache's Lua script do: the latest-value tie-break and the history's
-- order must not depend on PostgreSQL's locale (SQLite compares bytes).
{{if .Postgres}}
ALTER TABLE mount_states ALTER COLUMN value TYPE TEXT COLLATE "C";
--bun:split
ALTER TABLE mount_latest_states ALTER COLUMN value TYPE TEXT COLLATE "C";
{{else}}
SELECT 1;
{{end}}
