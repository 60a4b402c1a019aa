-- Jobs (docs/api.md, "Jobs"): one command for many mounts, whose targets
-- are fixed at creation. A job's counts are kept by the transactions that
-- move its targets (each locks the job's row), never recounted on read.
-- params is a JSON object; ended_at is NULL while ACTIVE.
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    code TEXT NOT NULL,
    params TEXT NOT NULL,
    filter TEXT NOT NULL,
    description TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    ended_at BIGINT,
    targets INTEGER NOT NULL,
    pending INTEGER NOT NULL,
    issued INTEGER NOT NULL,
    executed INTEGER NOT NULL,
    refused INTEGER NOT NULL,
    unconfirmed INTEGER NOT NULL,
    finished INTEGER NOT NULL,
    created_by TEXT NOT NULL
);
--bun:split
-- GET /jobs lists newest first; the active ones are counted per account.
CREATE INDEX jobs_account_created ON jobs (account_id, created_at, id);
--bun:split
CREATE INDEX jobs_account_active ON jobs (account_id) WHERE state = 'ACTIVE';
--bun:split
-- The expiry sweep reads only ACTIVE jobs by expires_at.
CREATE INDEX jobs_active_expiry ON jobs (expires_at) WHERE state = 'ACTIVE';
--bun:split
-- A job at each of its mounts. command_id is '' while PENDING; final says
-- the target will not move again but to EXECUTED.
CREATE TABLE job_targets (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    mount_uid TEXT NOT NULL,
    status TEXT NOT NULL,
    final BOOLEAN NOT NULL,
    command_id TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, mount_uid)
);
--bun:split
-- A phone's fetch at a mount reads the mount's unfinished targets.
CREATE INDEX job_targets_open ON job_targets (mount_uid, job_id) WHERE NOT final;
--bun:split
-- The job a command was signed for (a phone's pending commands).
ALTER TABLE commands ADD COLUMN job_id TEXT;
