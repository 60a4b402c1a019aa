ALTER TABLE alarms DROP COLUMN acknowledged_by_name;
--bun:split
ALTER TABLE api_clients DROP COLUMN name;
