ALTER TABLE commands DROP COLUMN issued_by_name;
