#!/usr/bin/env bash
# Builds mountd, mountsim and jobbench, starts a throw-away PostgreSQL and
# Redis (scripts/test-services.sh), serves mountd on them on a free
# loopback port and runs jobbench against it. Arguments go to jobbench:
#   cmd/jobbench/run.sh                      # the hour: 1,000 mounts, 10 phones every 6 s, a row every 10 min
#   cmd/jobbench/run.sh --mounts 100 --duration 3m --every 30s   # a trial run
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/bench}

if [ -z "${JOBBENCH_UNDER_SERVICES:-}" ]; then
  mkdir -p "$BENCH_DIR"
  (cd "$ROOT" && go build -o "$BENCH_DIR/mountd" ./cmd/mountd && go build -o "$BENCH_DIR/mountsim" ./cmd/mountsim \
    && cd bench && go build -o "$BENCH_DIR/jobbench" ./cmd/jobbench)
  export JOBBENCH_UNDER_SERVICES=1 BENCH_DIR
  exec "$ROOT/scripts/test-services.sh" "$0" "$@"
fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
DATA=$(mktemp -d /tmp/jobbench-data-XXXXXX)
SERVER_LOG="$BENCH_DIR/mountd-job.log"
MOUNTD_PID=""
stop_server() {
  if [ -n "$MOUNTD_PID" ]; then
    kill -TERM "$MOUNTD_PID" 2>/dev/null || true
    wait "$MOUNTD_PID" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap stop_server EXIT

MOUNTD_DATABASE_URL=$MOUNTD_TEST_DATABASE_URL MOUNTD_REDIS_URL=$MOUNTD_TEST_REDIS_URL \
MOUNTD_LISTEN=127.0.0.1:$PORT MOUNTD_DATA_DIR=$DATA MOUNTD_LOG_LEVEL=warn MOUNTD_TOKEN_TTL=6h \
MOUNTD_MASTER_KEY=$(printf 'ab%.0s' $(seq 32)) \
  "$BENCH_DIR/mountd" serve >"$SERVER_LOG" 2>&1 &
MOUNTD_PID=$!
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 1 300); do
  curl -fs "$BASE/readyz" >/dev/null 2>&1 && break
  kill -0 "$MOUNTD_PID" 2>/dev/null || { echo "run.sh: mountd exited" >&2; cat "$SERVER_LOG" >&2; exit 1; }
  sleep 0.1
done
"$BENCH_DIR/jobbench" --base "$BASE" --database-url "$MOUNTD_TEST_DATABASE_URL" --mountsim "$BENCH_DIR/mountsim" "$@"
