DROP INDEX IF EXISTS mounts_owner_last_seen;
--bun:split
CREATE INDEX mounts_owner_last_seen ON mounts (owner_account_id, last_seen_at);
--bun:split
DROP INDEX IF EXISTS mounts_owner_model;
--bun:split
CREATE INDEX mounts_owner_model ON mounts (owner_account_id, model_number);
--bun:split
DROP INDEX IF EXISTS mounts_owner_flags;
--bun:split
CREATE INDEX mounts_owner_flags ON mounts (owner_account_id, mount_locked, helmet_mounted, association_state, idle_deadline);
--bun:split
DROP INDEX IF EXISTS mounts_owner_temperature;
--bun:split
CREATE INDEX mounts_owner_temperature ON mounts (owner_account_id, cpu_temperature, association_state, idle_deadline);
--bun:split
DROP INDEX IF EXISTS mounts_owner_battery;
--bun:split
CREATE INDEX mounts_owner_battery ON mounts (owner_account_id, battery_level, association_state, idle_deadline);
