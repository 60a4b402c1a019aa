#!/usr/bin/env bash
# Builds mountd, mountsim and soak from this checkout and runs soak under
# scripts/test-services.sh (PostgreSQL, the Redis Cluster, nginx); soak
# starts its three replicas and nginx itself. BENCH_DIR (default /tmp/bench)
# holds the binaries and, under soak-runs/, each run's logs. Arguments go to soak:
#   cmd/soak/run.sh                     # the 10 minutes
#   cmd/soak/run.sh --duration 2m       # a trial, faults scaled to it
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BENCH_DIR=${BENCH_DIR:-/tmp/bench}
mkdir -p "$BENCH_DIR"
(cd "$ROOT" && go build -o "$BENCH_DIR/mountd" ./cmd/mountd && go build -o "$BENCH_DIR/mountsim" ./cmd/mountsim)
(cd "$ROOT/bench" && go build -o "$BENCH_DIR/soak" ./cmd/soak)
exec "$ROOT/scripts/test-services.sh" "$BENCH_DIR/soak" --root "$ROOT" --mountd "$BENCH_DIR/mountd" \
  --mountsim "$BENCH_DIR/mountsim" --dir "$BENCH_DIR/soak-runs" "$@"
