-- A webhook body is stored once per event, not once per attempt: an event
-- that 20 webhooks want, each retried, stored its body dozens of times.
-- The body is kept apart from the event log (which prunes on its own
-- retention) so that a pending attempt stays deliverable, byte for byte;
-- it is deleted with the last attempt that refers to it.
CREATE TABLE webhook_bodies (
    event_id TEXT PRIMARY KEY,
    body     TEXT NOT NULL
);
--bun:split
-- Every attempt of one event carried the same body (rendered once).
INSERT INTO webhook_bodies (event_id, body) SELECT event_id, MIN(payload) FROM webhook_deliveries GROUP BY event_id;
--bun:split
ALTER TABLE webhook_deliveries DROP COLUMN payload;
--bun:split
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
