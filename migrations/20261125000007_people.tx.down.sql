DROP TABLE refresh_tokens;
--bun:split
DROP TABLE auth_requests;
--bun:split
DROP TABLE users;
