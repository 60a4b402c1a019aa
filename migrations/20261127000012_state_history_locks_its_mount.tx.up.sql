-- On PostgreSQL a report's statement locks its mount once (FOR KEY SHARE,
-- adapters/bunstore), so the state history's foreign key, which took the
-- same lock once per stored entry, goes: 50 lookups of the mount per report
-- of 50 entries. A mount's history still goes with the mount, by a trigger.
-- Event bodies (a report's entries and the mount) pass the size PostgreSQL
-- compresses at; lz4 costs a fraction of the default pglz to write and read,
-- where the server has it. SQLite keeps its foreign key.
{{if .Postgres}}
ALTER TABLE mount_states DROP CONSTRAINT IF EXISTS mount_states_mount_uid_fkey;
--bun:split
DO $$
DECLARE c RECORD;
BEGIN
    -- The partition that was the table before partitioning may keep a
    -- foreign key of its own.
    FOR c IN SELECT con.conname, con.conrelid::regclass AS rel
        FROM pg_constraint con JOIN pg_inherits i ON i.inhrelid = con.conrelid
        WHERE i.inhparent = 'mount_states'::regclass AND con.contype = 'f' AND con.conislocal
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.rel, c.conname);
    END LOOP;
END $$;
--bun:split
CREATE FUNCTION mounts_delete_states() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mount_states WHERE mount_uid = OLD.uid;
    RETURN NULL;
END $$;
--bun:split
CREATE TRIGGER mounts_delete_states AFTER DELETE ON mounts
    FOR EACH ROW EXECUTE FUNCTION mounts_delete_states();
--bun:split
DO $$
BEGIN
    ALTER TABLE events ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    NULL; -- built without lz4: pglz stays
END $$;
{{else}}
SELECT 1;
{{end}}
