-- Sign-ins name the browser that started them (the SHA-256 of its cookie's
-- secret) and the source address they came from, whose open sign-ins are
-- counted through the index (docs/api.md, "People"). Sign-ins started
-- before have neither and can no longer be finished; they expire within
-- minutes.
ALTER TABLE auth_requests ADD COLUMN browser_hash TEXT NOT NULL DEFAULT '';
--bun:split
ALTER TABLE auth_requests ADD COLUMN source TEXT NOT NULL DEFAULT '';
--bun:split
CREATE INDEX auth_requests_source ON auth_requests (source, created_at);
