DROP TABLE IF EXISTS signing_keys;
--bun:split
DROP TABLE IF EXISTS api_clients;
--bun:split
DROP TABLE IF EXISTS accounts;
