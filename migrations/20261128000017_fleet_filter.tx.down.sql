DROP INDEX IF EXISTS mounts_owner_model;
--bun:split
DROP INDEX IF EXISTS mounts_owner_last_seen;
--bun:split
DROP INDEX IF EXISTS mount_latest_states_filter;
