ALTER TABLE mounts DROP COLUMN revision_key;
--bun:split
ALTER TABLE mounts DROP COLUMN revision_counter;
