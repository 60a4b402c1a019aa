CREATE INDEX mount_latest_states_filter ON mount_latest_states (account_id, code, {{if .Postgres}}(CAST(value AS DOUBLE PRECISION))) INCLUDE (mount_uid, value){{else}}CAST(value AS REAL), mount_uid){{end}};
--bun:split
{{if .Postgres}}CREATE STATISTICS mount_latest_states_code_value (mcv) ON code, (CAST(value AS DOUBLE PRECISION)) FROM mount_latest_states;{{else}}SELECT 1;{{end}}
--bun:split
{{if .Postgres}}ALTER STATISTICS mount_latest_states_code_value SET STATISTICS 2500;{{else}}SELECT 1;{{end}}
--bun:split
DROP INDEX IF EXISTS mounts_owner_live;
--bun:split
DROP INDEX IF EXISTS mounts_owner_flags;
--bun:split
DROP INDEX IF EXISTS mounts_owner_temperature;
--bun:split
DROP INDEX IF EXISTS mounts_owner_battery;
--bun:split
ALTER TABLE mounts DROP COLUMN helmet_mounted;
--bun:split
ALTER TABLE mounts DROP COLUMN mount_locked;
--bun:split
ALTER TABLE mounts DROP COLUMN cpu_temperature;
--bun:split
ALTER TABLE mounts DROP COLUMN battery_level;
