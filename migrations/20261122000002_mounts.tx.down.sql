DROP TABLE IF EXISTS firmware_versions;
--bun:split
DROP TABLE IF EXISTS nfc_tag_mounts;
--bun:split
DROP TABLE IF EXISTS nfc_tags;
--bun:split
DROP TABLE IF EXISTS commands;
--bun:split
DROP TABLE IF EXISTS mount_latest_states;
--bun:split
DROP TABLE IF EXISTS mount_states;
--bun:split
DROP TABLE IF EXISTS mounts;
