ALTER TABLE commands DROP COLUMN rollout_id;
--bun:split
DROP TABLE rollout_targets;
--bun:split
DROP TABLE rollouts;
