#!/usr/bin/env bash
# What one operation costs the machine, for the capacity model of
# docs/scaling.md: fleetbench --cost seeds (or restores) a fleet, then
# measures, one phase each at a fixed open-loop rate, GET /mounts/{uid}, a
# fleet filter page, the console's overview, a state report, a webhook
# delivery and a subscription push, reading the CPU time of mountd, of
# PostgreSQL (postmaster and children) and of Redis from /proc before and
# after, and PostgreSQL's WAL position. Arguments go to fleetbench, e.g.
#   bench/cost.sh                       # 10,000 mounts, 20 s phases
#   bench/cost.sh --mounts 1000 --cost-duration 30s --json
# PostgreSQL runs with fsync, synchronous_commit and full_page_writes on
# (scripts/test-services.sh turns them off for tests), so that the WAL and
# written bytes are those of a durable server. BENCH_DIR as for serve.sh;
# the seeded fleet is kept as fleetbench keeps it (bench/README.md).
set -euo pipefail
BENCH_DIR=${BENCH_DIR:-/tmp/bench}
export BENCH_DIR
export TEST_SERVICES_PG_OPTIONS="${TEST_SERVICES_PG_OPTIONS:-} -c fsync=on -c synchronous_commit=on -c full_page_writes=on"
exec "$(dirname "$0")/serve.sh" --prepare --pid \
  --mountd-env MOUNTD_OFFLINE_AFTER=1m --mountd-env MOUNTD_TOKEN_TTL=6h --mountd-env MOUNTD_COMMAND_TTL=1m \
  --mountd-env MOUNTD_WEBHOOK_ALLOW_PRIVATE=true \
  fleetbench --mountd "$BENCH_DIR/mountd" --state "$BENCH_DIR/fleetbench-state.json" --offline-after 1m \
  --cost --mounts 10000 "$@"
