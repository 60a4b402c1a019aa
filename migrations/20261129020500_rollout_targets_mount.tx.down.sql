DROP INDEX rollout_targets_mount;
