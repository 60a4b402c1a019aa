-- People of an account who sign in to the console (docs/api.md, "People"),
-- their sign-ins in progress (the authorization code flow; any replica may
-- serve any step) and their refresh tokens. Codes and tokens are stored as
-- SHA-256 hashes only.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    account_id    TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    role          TEXT NOT NULL,
    mount_uids    TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
--bun:split
CREATE INDEX users_account ON users (account_id, username);
--bun:split
CREATE TABLE auth_requests (
    id                    TEXT PRIMARY KEY,
    client_id             TEXT NOT NULL,
    redirect_uri          TEXT NOT NULL,
    state                 TEXT NOT NULL,
    nonce                 TEXT NOT NULL,
    scopes                TEXT NOT NULL,
    response_type         TEXT NOT NULL,
    response_mode         TEXT NOT NULL,
    code_challenge        TEXT NOT NULL,
    code_challenge_method TEXT NOT NULL,
    user_id               TEXT REFERENCES users (id) ON DELETE CASCADE,
    auth_time             BIGINT,
    code_hash             TEXT UNIQUE,
    created_at            BIGINT NOT NULL
);
--bun:split
CREATE INDEX auth_requests_created ON auth_requests (created_at);
--bun:split
CREATE TABLE refresh_tokens (
    hash       TEXT PRIMARY KEY,
    family     TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    client_id  TEXT NOT NULL,
    scopes     TEXT NOT NULL,
    auth_time  BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at    BIGINT
);
--bun:split
CREATE INDEX refresh_tokens_family ON refresh_tokens (family);
--bun:split
CREATE INDEX refresh_tokens_user ON refresh_tokens (user_id);
