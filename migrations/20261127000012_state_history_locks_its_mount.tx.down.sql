{{if .Postgres}}
ALTER TABLE events ALTER COLUMN body SET COMPRESSION default;
--bun:split
DROP TRIGGER mounts_delete_states ON mounts;
--bun:split
DROP FUNCTION mounts_delete_states();
--bun:split
DELETE FROM mount_states s WHERE NOT EXISTS (SELECT 1 FROM mounts m WHERE m.uid = s.mount_uid);
--bun:split
ALTER TABLE mount_states ADD CONSTRAINT mount_states_mount_uid_fkey
    FOREIGN KEY (mount_uid) REFERENCES mounts (uid) ON DELETE CASCADE;
{{else}}
SELECT 1;
{{end}}
