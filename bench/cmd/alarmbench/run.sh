#!/usr/bin/env bash
# Runs alarmbench against mountd on a throw-away PostgreSQL and Redis
# (bench/serve.sh). ALARMBENCH_OFFLINE_AFTER (default 60s) is mountd's
# MOUNTD_OFFLINE_AFTER and alarmbench's --offline-after.
# Arguments go to alarmbench, e.g. cmd/alarmbench/run.sh --mounts 10000 --json
after=${ALARMBENCH_OFFLINE_AFTER:-60s}
exec "$(dirname "$0")/../../serve.sh" --mountd-env "MOUNTD_OFFLINE_AFTER=$after" alarmbench --offline-after "$after" "$@"
