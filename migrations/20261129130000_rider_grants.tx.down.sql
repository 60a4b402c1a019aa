DROP TABLE IF EXISTS mount_revocations;
--bun:split
DROP TABLE IF EXISTS rider_grants;
