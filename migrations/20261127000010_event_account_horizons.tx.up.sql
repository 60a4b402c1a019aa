-- The position of each account's newest pruned event: a cursor of that
-- account before it is expired. An account's cursors are positions of its
-- own events, so expiry must not depend on other accounts' events. Empty
-- at first: cursors handed out before this migration are refused anyway
-- (they were not encrypted), and a reader without one starts at the oldest
-- retained event.
CREATE TABLE event_account_horizons (
    account_id  TEXT PRIMARY KEY,
    tx          {{if .Postgres}}xid8{{else}}INTEGER{{end}} NOT NULL,
    id          BIGINT NOT NULL
);
