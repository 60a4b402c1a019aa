-- When the mount's current association began: the claim of the unknown or
-- INACTIVE uid (the owner's claims during its own association keep it).
-- Receipts for commands generated before it belong to an earlier
-- association and answer 404 COMMAND_NOT_FOUND (docs/api.md, "The truth from
-- the mount"). NULL for associations begun before this column: their receipts
-- are not bounded.
ALTER TABLE mounts ADD COLUMN association_started_at BIGINT;
