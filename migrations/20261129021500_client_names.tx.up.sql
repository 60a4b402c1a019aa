-- Names, not ids (docs/api.md, "Audit log"): an API client has a name,
-- by default its account's name and " API client", that the audit log's
-- actor.name and alarms' acknowledgedByName show.
ALTER TABLE api_clients ADD COLUMN name TEXT NOT NULL DEFAULT '';
--bun:split
UPDATE api_clients SET name = (SELECT a.name FROM accounts a WHERE a.id = api_clients.account_id) || ' API client'
WHERE name = '';
--bun:split
ALTER TABLE alarms ADD COLUMN acknowledged_by_name TEXT;
--bun:split
-- Alarms acknowledged before: the client's name, or the person's username,
-- or the id when neither is known any more.
UPDATE alarms SET acknowledged_by_name = COALESCE(
    (SELECT c.name FROM api_clients c WHERE c.client_id = alarms.acknowledged_by),
    (SELECT u.username FROM users u WHERE u.id = alarms.acknowledged_by),
    acknowledged_by)
WHERE acknowledged_by IS NOT NULL;
--bun:split
-- Audit entries of clients were recorded under the client id, there being
-- no name: they show the client's name now.
UPDATE audit_log SET actor_name = (SELECT c.name FROM api_clients c WHERE c.client_id = audit_log.actor_id)
WHERE actor_type = 'client' AND actor_name = actor_id
    AND EXISTS (SELECT 1 FROM api_clients c WHERE c.client_id = audit_log.actor_id);
