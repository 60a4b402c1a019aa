#!/usr/bin/env bash
# Builds mountd and mountbench, starts a throw-away PostgreSQL and Redis
# (scripts/test-services.sh), serves mountd on them on a free loopback port,
# waits for /readyz, runs mountbench (default --scenario all) and stops
# everything again. Arguments go to mountbench, e.g.
#   cmd/mountbench/run.sh --duration 30s --clients 32 --json
# Environment: BENCH_DIR (default /tmp/bench) holds the binaries and, per
# run, the server log; MOUNTBENCH_MAX_LOAD (default 1.0) makes the script
# wait, in 30 s steps for up to 10 minutes, until the 1-minute load average
# is below it before it starts and before each measured phase (mountbench
# --max-load; 0 disables); MOUNTBENCH_PERF=1 records a perf
# profile of mountd during the run into $BENCH_DIR/mountd.perf.data;
# MOUNTBENCH_PG_STATS=1 loads pg_stat_statements into the throw-away
# PostgreSQL and writes its top statements after the run into
# $BENCH_DIR/pg_stat_statements.txt; MOUNTBENCH_MOUNTD=path runs that
# mountd binary instead of building one (an A/B of two versions).
# MOUNTD_B_BIN=<a mountd binary> also serves that build on the same
# database and Redis and passes it as --base-b (getmax: an A/B of two
# builds in one run). MOUNTBENCH_RESTORE=<a fleetbench dump> restores a
# seeded fleet into the database before mountd starts.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/bench}

if [ -z "${MOUNTBENCH_UNDER_SERVICES:-}" ]; then
  mkdir -p "$BENCH_DIR"
  if [ -n "${MOUNTBENCH_MOUNTD:-}" ]; then
    cp "$MOUNTBENCH_MOUNTD" "$BENCH_DIR/mountd"
  else
    (cd "$ROOT" && go build -o "$BENCH_DIR/mountd" ./cmd/mountd)
  fi
  (cd "$ROOT/bench" && go build -o "$BENCH_DIR/mountbench" ./cmd/mountbench)
  max_load=${MOUNTBENCH_MAX_LOAD:-1.0}
  if [ "$max_load" != 0 ]; then
    for i in $(seq 0 20); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      awk -v l="$load" -v m="$max_load" 'BEGIN { exit !(l < m) }' && break
      [ "$i" -eq 20 ] && { echo "run.sh: load average $load still >= $max_load after 10 minutes; running anyway" >&2; break; }
      echo "run.sh: load average $load >= $max_load, waiting 30s" >&2
      sleep 30
    done
  fi
  if [ -n "${MOUNTBENCH_PG_STATS:-}" ]; then
    export TEST_SERVICES_PG_OPTIONS="${TEST_SERVICES_PG_OPTIONS:-} -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
  fi
  export MOUNTBENCH_UNDER_SERVICES=1 BENCH_DIR
  exec "$ROOT/scripts/test-services.sh" "$0" "$@"
fi

log() { echo "run.sh: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

PORT=$(free_port)
DATA=$(mktemp -d /tmp/mountbench-data-XXXXXX)
SERVER_LOG="$BENCH_DIR/mountd.log"
MOUNTD_PID=""
MOUNTD_B_PID=""
PERF_PID=""
stop_server() {
  if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID" 2>/dev/null || true; wait "$PERF_PID" 2>/dev/null || true; fi
  for pid in $MOUNTD_PID $MOUNTD_B_PID; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$DATA"
}
trap stop_server EXIT

# start_mountd BINARY PORT LOG starts a mountd and sets STARTED_PID.
start_mountd() {
  MOUNTD_DATABASE_URL=$MOUNTD_TEST_DATABASE_URL MOUNTD_REDIS_URL=$MOUNTD_TEST_REDIS_URL \
  MOUNTD_LISTEN=127.0.0.1:$2 MOUNTD_DATA_DIR=$DATA MOUNTD_LOG_LEVEL=warn MOUNTD_TOKEN_TTL=6h \
  MOUNTD_MASTER_KEY=$(printf 'ab%.0s' $(seq 32)) \
    "$1" serve >"$3" 2>&1 &
  STARTED_PID=$!
  local base="http://127.0.0.1:$2"
  for _ in $(seq 1 300); do
    curl -fs "$base/readyz" >/dev/null 2>&1 && break
    kill -0 "$STARTED_PID" 2>/dev/null || { log "$1 exited"; cat "$3" >&2; exit 1; }
    sleep 0.1
  done
  curl -fs "$base/readyz" >/dev/null || { log "$1 not ready after 30s"; cat "$3" >&2; exit 1; }
  log "$1 (pid $STARTED_PID) ready on $base"
}

# MOUNTBENCH_RESTORE=<a fleetbench dump> measures beside a seeded fleet
# (another account's mounts, their history and events): the cost of a
# report or a delivery at a fleet's size. mountd migrates it when it starts.
if [ -n "${MOUNTBENCH_RESTORE:-}" ]; then
  pg_restore -d "$MOUNTD_TEST_DATABASE_URL" --no-owner "$MOUNTBENCH_RESTORE"
  psql -q "$MOUNTD_TEST_DATABASE_URL" -c 'VACUUM (ANALYZE)'
  log "restored $MOUNTBENCH_RESTORE"
fi

start_mountd "$BENCH_DIR/mountd" "$PORT" "$SERVER_LOG"
MOUNTD_PID=$STARTED_PID
BASE="http://127.0.0.1:$PORT"
EXTRA=()
if [ -n "${MOUNTD_B_BIN:-}" ]; then
  PORT_B=$(free_port)
  start_mountd "$MOUNTD_B_BIN" "$PORT_B" "$BENCH_DIR/mountd-b.log"
  MOUNTD_B_PID=$STARTED_PID
  EXTRA=(--base-b "http://127.0.0.1:$PORT_B")
fi

REDIS_PORT=${MOUNTD_TEST_REDIS_URL##*:}
REDIS_PORT=${REDIS_PORT%%/*}
WATCH="mountd=$MOUNTD_PID"
[ -n "$MOUNTD_B_PID" ] && WATCH="$WATCH,mountd-b=$MOUNTD_B_PID"
REDIS_PID=$(redis-cli -p "$REDIS_PORT" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
[ -n "$REDIS_PID" ] && WATCH="$WATCH,redis=$REDIS_PID"

if [ -n "${MOUNTBENCH_PERF:-}" ]; then
  perf record -F 499 -g -p "$MOUNTD_PID" -o "$BENCH_DIR/mountd.perf.data" >/dev/null 2>&1 &
  PERF_PID=$!
fi

if [ -n "${MOUNTBENCH_PG_STATS:-}" ]; then
  psql -q "$MOUNTD_TEST_DATABASE_URL" -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' -c 'SELECT pg_stat_statements_reset()' >/dev/null
fi

# The admin URL of the throw-away server; mountd migrated it at start.
rc=0
"$BENCH_DIR/mountbench" --base "$BASE" --database-url "$MOUNTD_TEST_DATABASE_URL" --watch "$WATCH" --max-load "${MOUNTBENCH_MAX_LOAD:-1.0}" "${EXTRA[@]}" "$@" || rc=$?
if [ -n "${MOUNTBENCH_PG_STATS:-}" ]; then
  psql -q "$MOUNTD_TEST_DATABASE_URL" -P pager=off -c "SELECT calls, round(total_exec_time) AS total_ms,
      round((mean_exec_time * 1000)::numeric) AS mean_us, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 160) AS query
    FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25" >"$BENCH_DIR/pg_stat_statements.txt" || true
  log "top statements in $BENCH_DIR/pg_stat_statements.txt"
fi
if [ -s "$SERVER_LOG" ]; then
  log "mountd log (warnings and errors), last lines:"
  tail -n 20 "$SERVER_LOG" >&2
fi
exit $rc
