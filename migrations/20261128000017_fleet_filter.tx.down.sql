DROP INDEX IF EXISTS mounts_owner_model;
--bun:split
DROP INDEX IF EXISTS mounts_owner_last_seen;
--bun:split
{{if .Postgres}}DROP STATISTICS IF EXISTS mount_latest_states_code_value;{{else}}SELECT 1;{{end}}
--bun:split
DROP INDEX IF EXISTS mount_latest_states_filter;
