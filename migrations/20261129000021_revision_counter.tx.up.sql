-- The mount's softwareRevision follows its verified report with the highest
-- counter (docs/api.md, "The truth from the mount"): revision_counter is that
-- report's counter and revision_key the device key that signed it (the
-- counter is the key's: a new key starts afresh). NULL until a verified
-- report set them.
ALTER TABLE mounts ADD COLUMN revision_counter BIGINT;
--bun:split
ALTER TABLE mounts ADD COLUMN revision_key TEXT;
