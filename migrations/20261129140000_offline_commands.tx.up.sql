-- A mount's offline uses (CONTRACT §21) are commands of the grant's
-- account, recorded from the mount's signed receipts: grant_id names the
-- grant; their payload and signed token are empty (the API shows null).
ALTER TABLE commands ADD COLUMN grant_id TEXT;
