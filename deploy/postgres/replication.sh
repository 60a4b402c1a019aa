#!/bin/sh
# Run once by the postgres image when it creates the primary's database
# (/docker-entrypoint-initdb.d, compose.scale.yaml): a role that may stream
# the WAL, and the pg_hba.conf line that lets it connect for replication.
# A primary whose volume was created without it needs both by hand (or
# `docker compose ... down -v`, which drops the data).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '${REPLICATION_PASSWORD:?}';
SQL
echo "host replication replicator all scram-sha-256" >>"$PGDATA/pg_hba.conf"
