DROP INDEX webhook_deliveries_event;
--bun:split
ALTER TABLE webhook_deliveries ADD COLUMN payload TEXT NOT NULL DEFAULT '';
--bun:split
UPDATE webhook_deliveries SET payload = COALESCE((SELECT body FROM webhook_bodies b WHERE b.event_id = webhook_deliveries.event_id), '');
--bun:split
DROP TABLE webhook_bodies;
