DROP TABLE webhook_dispatch;
--bun:split
DROP TABLE webhook_deliveries;
--bun:split
DROP TABLE webhooks;
