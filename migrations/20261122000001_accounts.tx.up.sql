CREATE TABLE IF NOT EXISTS accounts (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
--bun:split
CREATE TABLE IF NOT EXISTS api_clients (
    client_id   TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    secret_hash TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
--bun:split
CREATE INDEX IF NOT EXISTS api_clients_account_id ON api_clients (account_id);
--bun:split
-- Keys the service signs with (the identity provider's key). The private
-- half is sealed with the master key; one row per purpose, so replicas that
-- start together agree on the first key.
CREATE TABLE IF NOT EXISTS signing_keys (
    id                 TEXT PRIMARY KEY,
    purpose            TEXT NOT NULL UNIQUE,
    algorithm          TEXT NOT NULL,
    public_key         TEXT NOT NULL,
    sealed_private_key TEXT NOT NULL,
    created_at         BIGINT NOT NULL
);
