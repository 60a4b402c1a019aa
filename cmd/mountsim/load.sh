#!/usr/bin/env bash
# The fleet load test: mountsim drives N mounts (default 5000) reporting every
# 10 s against one mountd on a throw-away PostgreSQL and Redis, then counts the
# stored entries against what mountsim saw accepted, and samples mountd's CPU
# and memory. Run from the repository root:
#   bash cmd/mountsim/load.sh            # MOUNTS=5000 DURATION=120s INTERVAL=10s
set -euo pipefail
cd "$(dirname "$0")/../.."
MOUNTS=${MOUNTS:-5000}
DURATION=${DURATION:-120s}
INTERVAL=${INTERVAL:-10s}
work=$(mktemp -d /tmp/mountsim-load-XXXXXX)
go build -o "$work/" ./cmd/mountd ./cmd/mountsim

run() {
  set -euo pipefail
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export MOUNTD_DATABASE_URL=$MOUNTD_TEST_DATABASE_URL MOUNTD_REDIS_URL=$MOUNTD_TEST_REDIS_URL
  export MOUNTD_LISTEN=127.0.0.1:$port MOUNTD_DATA_DIR=$work/data MOUNTD_LOG_LEVEL=warn
  "$work/mountd" serve > "$work/mountd.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "load.sh: mountd exited" >&2; cat "$work/mountd.log" >&2; exit 1; }
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { echo "load.sh: mountd not ready after 30s" >&2; cat "$work/mountd.log" >&2; exit 1; }
  acc=$("$work/mountd" accounts create --name load --json)
  id=$(sed -E 's/.*"clientId":"([^"]+)".*/\1/' <<<"$acc")
  secret=$(sed -E 's/.*"clientSecret":"([^"]+)".*/\1/' <<<"$acc")
  # sample mountd's CPU time and RSS every 5 s while the fleet runs
  ( while kill -0 $pid 2>/dev/null; do
      echo "$(date +%s) $(awk '{print $14+$15}' /proc/$pid/stat) $(awk '/VmRSS/{print $2}' /proc/$pid/status)"
      sleep 5
    done ) > "$work/samples" &
  sampler=$!
  "$work/mountsim" --mounts "$MOUNTS" --air "" --api "http://127.0.0.1:$port" --client-id "$id" --client-secret "$secret" \
    --associate --report-interval "$INTERVAL" --duration "$DURATION" --concurrency 32 --log-level warn --json > "$work/summary.json"
  kill $sampler 2>/dev/null || true
  stored=$(psql "$MOUNTD_TEST_DATABASE_URL" -Atc "SELECT COUNT(*) FROM mount_states")
  echo "mountsim summary: $(cat "$work/summary.json")"
  echo "entries stored in PostgreSQL: $stored"
  hz=$(getconf CLK_TCK)
  awk -v hz="$hz" 'NR==1{t0=$1;c0=$2} {t=$1;c=$2; if ($3>max) max=$3} END {
    printf "mountd CPU: %.1f%% of one core on average over %ds; peak RSS %.0f MiB\n", 100*(c-c0)/hz/(t-t0), t-t0, max/1024 }' "$work/samples"
  grep -ci "error" "$work/mountd.log" | sed 's/^/mountd log lines with "error": /'
}
export -f run
export work MOUNTS DURATION INTERVAL
scripts/test-services.sh bash -c run
