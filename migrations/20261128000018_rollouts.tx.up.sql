-- Rollouts (docs/api.md, "Rollouts"): one firmware revision for the mounts
-- of a model, opened to them in phases. As a job's, a rollout's counts are
-- kept by the transactions that move its targets (each locks the
-- rollout's row), never recounted on read. phases is a JSON array of
-- cumulative percentages; health_window is in milliseconds; ended_at is
-- NULL until COMPLETED or CANCELED; paused_reason is '' unless PAUSED.
-- sample_healthy and sample_failed count the targets decided since the
-- rollout was created or last resumed (the failure threshold's sample).
CREATE TABLE rollouts (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    model_number TEXT NOT NULL,
    software_revision TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    filter TEXT NOT NULL,
    phases TEXT NOT NULL,
    failure_threshold INTEGER NOT NULL,
    min_sample INTEGER NOT NULL,
    health_window BIGINT NOT NULL,
    require_idle BOOLEAN NOT NULL,
    state TEXT NOT NULL,
    paused_reason TEXT NOT NULL,
    open_phase INTEGER NOT NULL,
    targets INTEGER NOT NULL,
    pending INTEGER NOT NULL,
    eligible INTEGER NOT NULL,
    installing INTEGER NOT NULL,
    healthy INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    sample_healthy INTEGER NOT NULL,
    sample_failed INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    ended_at BIGINT,
    created_by TEXT NOT NULL
);
--bun:split
-- GET /rollouts lists newest first.
CREATE INDEX rollouts_account_created ON rollouts (account_id, created_at, id);
--bun:split
-- One RUNNING or PAUSED rollout per account and model: of two creations at
-- once, the second fails on this index.
CREATE UNIQUE INDEX rollouts_one_live ON rollouts (account_id, model_number) WHERE state IN ('RUNNING', 'PAUSED');
--bun:split
-- A rollout at each of its mounts. command_id is '' before any command;
-- installing_since is NULL before the first fetch; decide_at is when the
-- health window of an INSTALLING target of a RUNNING or PAUSED rollout
-- ends (NULL otherwise: a canceled rollout's targets are never decided);
-- new_revision_counter is the highest counter of a verified report on the
-- rollout's revision (NULL before any); reason says why a target FAILED.
CREATE TABLE rollout_targets (
    rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    mount_uid TEXT NOT NULL,
    phase INTEGER NOT NULL,
    state TEXT NOT NULL,
    command_id TEXT NOT NULL,
    installing_since BIGINT,
    decide_at BIGINT,
    new_revision_counter BIGINT,
    reason TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (rollout_id, mount_uid)
);
--bun:split
-- The sweep reads the INSTALLING targets whose health window ended.
CREATE INDEX rollout_targets_due ON rollout_targets (decide_at) WHERE state = 'INSTALLING' AND decide_at IS NOT NULL;
--bun:split
-- A phone's fetch (and a verified report) at a mount reads the mount's
-- offered targets.
CREATE INDEX rollout_targets_offered ON rollout_targets (mount_uid, rollout_id) WHERE state IN ('ELIGIBLE', 'INSTALLING');
--bun:split
-- Opening a phase turns its PENDING targets ELIGIBLE in one statement.
CREATE INDEX rollout_targets_pending ON rollout_targets (rollout_id, phase) WHERE state = 'PENDING';
--bun:split
-- The rollout an INSTALL_FIRMWARE was signed for.
ALTER TABLE commands ADD COLUMN rollout_id TEXT;
