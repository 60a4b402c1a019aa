DROP INDEX auth_requests_source;
--bun:split
ALTER TABLE auth_requests DROP COLUMN source;
--bun:split
ALTER TABLE auth_requests DROP COLUMN browser_hash;
