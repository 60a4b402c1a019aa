-- Names, not ids (issue 38): a command keeps the name its issuer had when
-- it was issued (a person's username, an API client's name), shown as
-- issuedByName beside issuedBy.
ALTER TABLE commands ADD COLUMN issued_by_name TEXT NOT NULL DEFAULT '';
--bun:split
-- Commands issued before: the client's name now, or the person's username;
-- '' when neither is known (the API then shows the id).
UPDATE commands SET issued_by_name = COALESCE(
    (SELECT c.name FROM api_clients c WHERE c.client_id = commands.issued_by),
    (SELECT u.username FROM users u WHERE u.id = commands.issued_by),
    '');
