#!/usr/bin/env bash
# The performance regression check (`make bench-check`): runs the ingest,
# GET and onboarding scenarios of mountbench, signed against unsigned and
# 10 flipping rules against none, GET's most requests/s against a bare
# handler, its webhook burst, drain, steady 1,000/s and 20 accounts
# (5,000 reports each, about a minute), fleetbench's reads over 100,000
# mounts (a restored dump, 20 s of each side) and the fan-out benchmark
# (subscribers with equal operations, and with operations whose texts
# differ) briefly, RUNS times (default 3), each on its own throw-away PostgreSQL and
# Redis, then bench/cmd/benchcheck compares the median of every ratio with
# the one recorded in bench/baseline.txt and fails when one fell more than
# 20 % below it. A ratio is the figure over a baseline measured in the same
# run, so the check holds on a busy machine; it does not wait for a quiet
# one (MOUNTBENCH_MAX_LOAD=1.0 makes each run wait, as run.sh does alone).
# Environment: RUNS, OUT (results; default a new /tmp/bench-check-XXXXXX),
# DURATION (each measured phase, default 6s; ingest and onboarding split it
# into six rounds alternating with their baselines). Needs NATS and Mosquitto on
# their usual ports, like bench/cmd/fanoutbench/run.sh. About 12 minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-3}
DURATION=${DURATION:-6s}
OUT=${OUT:-$(mktemp -d /tmp/bench-check-XXXXXX)}
mkdir -p "$OUT/bin"
log() { echo "bench-check: $*" >&2; }

(cd "$ROOT" && go build -o "$OUT/bin/mountd" ./cmd/mountd)
(cd "$ROOT/bench" && go build -o "$OUT/bin/benchcheck" ./cmd/benchcheck)
log "results in $OUT; load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$RUNS"); do
  log "run $i of $RUNS: mountbench ingest, get, onboard"
  BENCH_DIR="$OUT/mountbench-$i" MOUNTBENCH_MOUNTD="$OUT/bin/mountd" MOUNTBENCH_MAX_LOAD=${MOUNTBENCH_MAX_LOAD:-0} \
    "$ROOT/bench/cmd/mountbench/run.sh" --scenario ingest,get,onboard --clients 16 --onboard-clients 32 --rounds 6 \
    --duration "$DURATION" --warmup 1s --json >"$OUT/mountbench-$i.json" 2>"$OUT/mountbench-$i.log" \
    || { log "mountbench failed:"; tail -20 "$OUT/mountbench-$i.log" >&2; exit 1; }
  log "run $i of $RUNS: mountbench signed and rules ingest (16 clients), GET's most requests/s (32 connections)"
  BENCH_DIR="$OUT/ratios-$i" MOUNTBENCH_MOUNTD="$OUT/bin/mountd" MOUNTBENCH_MAX_LOAD=${MOUNTBENCH_MAX_LOAD:-0} \
    "$ROOT/bench/cmd/mountbench/run.sh" --scenario signed,rules --clients 16 --batch 50 --mounts 100 --rounds 2 \
    --duration 16s --warmup 1s --json >"$OUT/ratios-$i.json" 2>"$OUT/ratios-$i.log" \
    || { log "mountbench signed/rules failed:"; tail -20 "$OUT/ratios-$i.log" >&2; exit 1; }
  BENCH_DIR="$OUT/getmax-$i" MOUNTBENCH_MOUNTD="$OUT/bin/mountd" MOUNTBENCH_MAX_LOAD=${MOUNTBENCH_MAX_LOAD:-0} \
    "$ROOT/bench/cmd/mountbench/run.sh" --scenario getmax --clients 32 --rounds 3 --duration 9s --warmup 1s \
    --json >"$OUT/getmax-$i.json" 2>"$OUT/getmax-$i.log" \
    || { log "mountbench getmax failed:"; tail -20 "$OUT/getmax-$i.log" >&2; exit 1; }
  log "run $i of $RUNS: mountbench webhook burst, drain, steady 1,000/s and 20 accounts"
  BENCH_DIR="$OUT/webhooks-$i" MOUNTBENCH_MOUNTD="$OUT/bin/mountd" MOUNTBENCH_MAX_LOAD=${MOUNTBENCH_MAX_LOAD:-0} \
    MOUNTD_WEBHOOK_ALLOW_PRIVATE=true "$ROOT/bench/cmd/mountbench/run.sh" --scenario webhook-burst,webhook-drain,webhook-steady,webhook-fair \
    --mounts 20 --max-busy 0 --json >"$OUT/webhooks-$i.json" 2>"$OUT/webhooks-$i.log" \
    || { log "mountbench webhooks failed:"; tail -20 "$OUT/webhooks-$i.log" >&2; exit 1; }
  log "run $i of $RUNS: fleetbench, reads over 100,000 mounts"
  # The newest seeded fleet in the cache, migrated forward by this build
  # when it starts; without one, the first run seeds it (about 20 minutes,
  # once per machine).
  dump=$(ls -t "${FLEETBENCH_CACHE:-$HOME/.cache/mountd-bench}"/fleet-100000-*.dump 2>/dev/null | head -1 || true)
  BENCH_DIR="$OUT/fleet-$i" FLEETBENCH_MOUNTD="$OUT/bin/mountd" "$ROOT/bench/cmd/fleetbench/run.sh" --mounts 100000 \
    ${dump:+--dump "$dump"} --rounds 1 --duration 20s --overview-runs 5 --json >"$OUT/fleet-$i.json" 2>"$OUT/fleet-$i.log" \
    || { log "fleetbench failed:"; tail -20 "$OUT/fleet-$i.log" >&2; exit 1; }
  # Named before the fan-out's OUT is: a prefix assignment sees the ones before it.
  MOUNTD_BIN="$OUT/bin/mountd"
  for ops in shared distinct; do
    log "run $i of $RUNS: fan-out, 200 subscribers ($ops operations), mountd against Mosquitto"
    extra="--drain 3s --settle 1s --retries 0"
    [ "$ops" = distinct ] && extra="$extra --distinct"
    OUT="$OUT/fanout-$ops-$i" BACKENDS=postgres+redis SUBSCRIBERS=200 REPORTS=100 SYSTEMS=mountd,mqtt LOAD_MAX=0 \
      MOUNTD="$MOUNTD_BIN" EXTRA="$extra" "$ROOT/bench/cmd/fanoutbench/run.sh" >"$OUT/fanout-$ops-$i.log" 2>&1 \
      || { log "fanoutbench failed:"; tail -20 "$OUT/fanout-$ops-$i.log" >&2; exit 1; }
  done
done
"$OUT/bin/benchcheck" --baseline "$ROOT/bench/baseline.txt" "$OUT"/mountbench-*.json "$OUT"/ratios-*.json "$OUT"/getmax-*.json "$OUT"/webhooks-*.json "$OUT"/fleet-*.json "$OUT"/fanout-*/result-*.json
