-- A mount's rollouts (GraphQL mountRollouts): its targets in every state,
-- not only the undecided ones rollout_targets_undecided holds.
CREATE INDEX rollout_targets_mount ON rollout_targets (mount_uid, rollout_id);
