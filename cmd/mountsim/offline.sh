#!/usr/bin/env bash
# The offline-access load run: mountsim drives MOUNTS mounts (associated,
# reporting) and RIDERS riders, each with a grant on 3 mounts, OFFLINE of
# them without network at the mounts, REVOKE of the grants revoked during
# the run, a mount restarted every RESTART, KILL of the riders' receipt
# uploads killed with their app, and PHONES phones running jobs that also
# carry revocation lists; against one mountd on a throw-away PostgreSQL and
# Redis (scripts/test-services.sh). Prints mountsim's summary (text, then
# JSON in OUT) and mountd's CPU and peak RSS. Run from the repository root:
#   bash cmd/mountsim/offline.sh      # MOUNTS=1000 RIDERS=200 DURATION=5m
set -euo pipefail
cd "$(dirname "$0")/../.."
MOUNTS=${MOUNTS:-1000}
RIDERS=${RIDERS:-200}
PHONES=${PHONES:-100}
OFFLINE=${OFFLINE:-0.3}
REVOKE=${REVOKE:-0.1}
RESTART=${RESTART:-2s}
KILL=${KILL:-0.1}
PASS_EVERY=${PASS_EVERY:-20s}
DURATION=${DURATION:-5m}
INTERVAL=${INTERVAL:-60s}
SEED=${SEED:-1}
OUT=${OUT:-$(mktemp -d /tmp/mountsim-offline-XXXXXX)}
mkdir -p "$OUT"
go build -o "$OUT/" ./cmd/mountd ./cmd/mountsim

run() {
  set -euo pipefail
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export MOUNTD_DATABASE_URL=$MOUNTD_TEST_DATABASE_URL MOUNTD_REDIS_URL=$MOUNTD_TEST_REDIS_URL
  export MOUNTD_LISTEN=127.0.0.1:$port MOUNTD_DATA_DIR=$OUT/data MOUNTD_LOG_LEVEL=warn
  export MOUNTD_MASTER_KEY=$(printf 'ab%.0s' $(seq 32))
  "$OUT/mountd" serve > "$OUT/mountd.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "offline.sh: mountd exited" >&2; cat "$OUT/mountd.log" >&2; exit 1; }
    sleep 0.1
  done
  acc=$("$OUT/mountd" accounts create --name offline --json)
  id=$(sed -E 's/.*"clientId":"([^"]+)".*/\1/' <<<"$acc")
  secret=$(sed -E 's/.*"clientSecret":"([^"]+)".*/\1/' <<<"$acc")
  ( while kill -0 $pid 2>/dev/null; do
      echo "$(date +%s) $(awk '{print $14+$15}' /proc/$pid/stat) $(awk '/VmRSS/{print $2}' /proc/$pid/status)"
      sleep 5
    done ) > "$OUT/samples" &
  sampler=$!
  args=(--mounts "$MOUNTS" --prefix OFF --air "" --api "http://127.0.0.1:$port" --associate
    --report-interval "$INTERVAL" --riders "$RIDERS" --mounts-per-rider 3 --phones "$PHONES" --pass-every "$PASS_EVERY"
    --offline "$OFFLINE" --revoke "$REVOKE" --restart-every "$RESTART" --kill-uploads "$KILL"
    --duration "$DURATION" --seed "$SEED" --concurrency 32 --log-level warn)
  echo "mountsim ${args[*]}" | sed "s/$secret/SECRET/"
  MOUNTSIM_CLIENT_ID=$id MOUNTSIM_CLIENT_SECRET=$secret "$OUT/mountsim" "${args[@]}" --json > "$OUT/summary.json" 2> "$OUT/mountsim.log"
  kill $sampler 2>/dev/null || true
  python3 -m json.tool "$OUT/summary.json"
  hz=$(getconf CLK_TCK)
  awk -v hz="$hz" 'NR==1{t0=$1;c0=$2} {t=$1;c=$2; if ($3>max) max=$3} END {
    printf "mountd CPU: %.1f%% of one core on average over %ds; peak RSS %.0f MiB\n", 100*(c-c0)/hz/(t-t0), t-t0, max/1024 }' "$OUT/samples"
  echo "mountsim log lines at warn or above: $(grep -c 'level=\(WARN\|ERROR\)' "$OUT/mountsim.log" || true) (in $OUT/mountsim.log)"
}
export -f run
export OUT MOUNTS RIDERS PHONES OFFLINE REVOKE RESTART KILL PASS_EVERY DURATION INTERVAL SEED
scripts/test-services.sh bash -c run
