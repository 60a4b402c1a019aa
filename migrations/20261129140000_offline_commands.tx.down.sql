ALTER TABLE commands DROP COLUMN grant_id;
