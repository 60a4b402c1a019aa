#!/usr/bin/env bash
# What the measuring tools' run.sh share: build mountd and the tool, start a
# throw-away PostgreSQL and Redis (scripts/test-services.sh), serve mountd on
# them on a free loopback port, and run the tool against it with
# --base URL --database-url URL and the tool's own arguments.
#
#   serve.sh [--pid] [--mountsim] [--prepare] [--mountd-env NAME=VALUE]... TOOL [ARG]...
#
# --pid gives the tool --pid with mountd's pid (for its peak RSS); --mountsim
# builds mountsim too and gives the tool --mountsim with its path;
# --prepare runs the tool once with --prepare (and its arguments) on the
# empty database before mountd starts (fleetbench restores its fleet);
# --mountd-env adds to mountd's environment. BENCH_DIR (default /tmp/bench)
# holds the binaries and mountd's log, mountd-TOOL.log. SERVE_MOUNTD=path
# serves that mountd binary instead of building one (an A/B of two builds).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/bench}

if [ -z "${SERVE_UNDER_SERVICES:-}" ]; then
  args=("$@")
  with_mountsim=""
  while [ $# -gt 0 ]; do
    case $1 in
      --pid|--prepare) shift ;;
      --mountsim) with_mountsim=1; shift ;;
      --mountd-env) shift 2 ;;
      *) break ;;
    esac
  done
  tool=$1
  mkdir -p "$BENCH_DIR"
  if [ -n "${SERVE_MOUNTD:-}" ]; then
    cp "$SERVE_MOUNTD" "$BENCH_DIR/mountd"
  else
    (cd "$ROOT" && go build -o "$BENCH_DIR/mountd" ./cmd/mountd)
  fi
  if [ -n "$with_mountsim" ]; then (cd "$ROOT" && go build -o "$BENCH_DIR/mountsim" ./cmd/mountsim); fi
  (cd "$ROOT/bench" && go build -o "$BENCH_DIR/$tool" "./cmd/$tool")
  export SERVE_UNDER_SERVICES=1 BENCH_DIR
  exec "$ROOT/scripts/test-services.sh" "$0" "${args[@]}"
fi

tool_flags=()
mountd_env=()
while [ $# -gt 0 ]; do
  case $1 in
    --pid) pass_pid=1; shift ;;
    --prepare) prepare=1; shift ;;
    --mountsim) tool_flags+=(--mountsim "$BENCH_DIR/mountsim"); shift ;;
    --mountd-env) mountd_env+=("$2"); shift 2 ;;
    *) break ;;
  esac
done
tool=$1
shift

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
DATA=$(mktemp -d "/tmp/$tool-data-XXXXXX")
SERVER_LOG="$BENCH_DIR/mountd-$tool.log"
MOUNTD_PID=""
stop_server() {
  if [ -n "$MOUNTD_PID" ]; then
    kill -TERM "$MOUNTD_PID" 2>/dev/null || true
    wait "$MOUNTD_PID" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap stop_server EXIT

MASTER_KEY=$(printf 'ab%.0s' $(seq 32))
if [ -n "${prepare:-}" ]; then
  MOUNTD_DATA_DIR="$DATA" MOUNTD_MASTER_KEY="$MASTER_KEY" MOUNTD_DATABASE_URL="$MOUNTD_TEST_DATABASE_URL" \
    "$BENCH_DIR/$tool" --prepare --database-url "$MOUNTD_TEST_DATABASE_URL" "$@"
fi

env MOUNTD_DATABASE_URL="$MOUNTD_TEST_DATABASE_URL" MOUNTD_REDIS_URL="$MOUNTD_TEST_REDIS_URL" \
  MOUNTD_LISTEN="127.0.0.1:$PORT" MOUNTD_DATA_DIR="$DATA" MOUNTD_LOG_LEVEL=warn \
  MOUNTD_MASTER_KEY="$MASTER_KEY" "${mountd_env[@]}" \
  "$BENCH_DIR/mountd" serve >"$SERVER_LOG" 2>&1 &
MOUNTD_PID=$!
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 1 300); do
  curl -fs "$BASE/readyz" >/dev/null 2>&1 && break
  kill -0 "$MOUNTD_PID" 2>/dev/null || { echo "serve.sh: mountd exited" >&2; cat "$SERVER_LOG" >&2; exit 1; }
  sleep 0.1
done
if [ -n "${pass_pid:-}" ]; then tool_flags+=(--pid "$MOUNTD_PID"); fi
# The tool may run mountd's admin commands on the same data (rolloutbench:
# firmware publish): it gets mountd's data directory, key and database.
MOUNTD_DATA_DIR="$DATA" MOUNTD_MASTER_KEY="$MASTER_KEY" MOUNTD_DATABASE_URL="$MOUNTD_TEST_DATABASE_URL" \
  "$BENCH_DIR/$tool" --base "$BASE" --database-url "$MOUNTD_TEST_DATABASE_URL" "${tool_flags[@]}" "$@"
