#!/usr/bin/env bash
# Runs fleetbench against mountd on a throw-away PostgreSQL and Redis
# (bench/serve.sh). Arguments go to fleetbench, e.g.
#   cmd/fleetbench/run.sh --mounts 1000 --duration 10s --json
# Before mountd starts, fleetbench --prepare restores the seeded fleet from
# its dump when there is one (FLEETBENCH_CACHE, default ~/.cache/mountd-bench;
# --reseed or removing the file seeds anew; --dump FILE restores that one).
# Environment: FLEETBENCH_MOUNTD=path serves that mountd binary instead of
# building one (an A/B of two builds, each on the same dump);
# FLEETBENCH_OFFLINE_AFTER (default 1m) is mountd's MOUNTD_OFFLINE_AFTER: the
# seeded mounts must all go OFFLINE, and be announced, before the dump is
# taken; the seed's commands (no receipts) expire after 1m (MOUNTD_COMMAND_TTL)
# and are swept before it too; BENCH_DIR (default /tmp/bench) holds the binaries, mountd's log and
# the state --prepare leaves for the run.
set -euo pipefail
BENCH_DIR=${BENCH_DIR:-/tmp/bench}
OFFLINE_AFTER=${FLEETBENCH_OFFLINE_AFTER:-1m}
export BENCH_DIR
if [ -n "${FLEETBENCH_MOUNTD:-}" ]; then export SERVE_MOUNTD=$FLEETBENCH_MOUNTD; fi
exec "$(dirname "$0")/../../serve.sh" --prepare \
  --mountd-env "MOUNTD_OFFLINE_AFTER=$OFFLINE_AFTER" --mountd-env MOUNTD_TOKEN_TTL=6h --mountd-env MOUNTD_COMMAND_TTL=1m \
  fleetbench --mountd "$BENCH_DIR/mountd" --state "$BENCH_DIR/fleetbench-state.json" \
  --offline-after "$OFFLINE_AFTER" "$@"
