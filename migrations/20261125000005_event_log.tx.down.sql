DROP TABLE event_horizon;
--bun:split
DROP TABLE events;
