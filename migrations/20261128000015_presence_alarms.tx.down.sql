DROP TABLE alarms;
--bun:split
DROP TABLE alarm_rules;
--bun:split
DROP INDEX mounts_unannounced_lapse;
--bun:split
ALTER TABLE mounts DROP COLUMN offline_announced;
--bun:split
ALTER TABLE mounts DROP COLUMN last_seen_at;
