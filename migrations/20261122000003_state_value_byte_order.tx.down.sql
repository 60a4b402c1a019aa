{{if .Postgres}}
ALTER TABLE mount_latest_states ALTER COLUMN value TYPE TEXT COLLATE "default";
--bun:split
ALTER TABLE mount_states ALTER COLUMN value TYPE TEXT COLLATE "default";
{{else}}
SELECT 1;
{{end}}
