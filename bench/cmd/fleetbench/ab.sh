#!/usr/bin/env bash
# An A/B of two mountd builds on the same seeded fleet, alternating in one
# run: ab.sh BEFORE_BINARY AFTER_BINARY [fleetbench argument]...
# It first makes sure the fleet's dump exists for the before build (seeding
# it once through the API if not: a run of one short round), then runs
# fleetbench RUNS times (default 3) for each build in turn, both restoring
# that dump (the after build migrates it forward when it starts), and prints
# the medians. Results in OUT (default a new /tmp/fleet-ab-XXXXXX).
#   cmd/fleetbench/ab.sh /tmp/mountd-before /tmp/mountd-after --mounts 100000
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY [fleetbench argument]..." >&2; exit 2; }
BEFORE=$1 AFTER=$2
shift 2
HERE=$(dirname "$0")
RUNS=${RUNS:-3}
OUT=${OUT:-$(mktemp -d /tmp/fleet-ab-XXXXXX)}
mkdir -p "$OUT"
export BENCH_DIR=${BENCH_DIR:-$OUT/bench}
log() { echo "ab.sh: $*" >&2; }

FLEETBENCH_MOUNTD=$BEFORE "$HERE/run.sh" "$@" --rounds 1 --duration 1s --overview-runs 0 --ingest-rate 0 --json \
  >"$OUT/seed.json" 2>"$OUT/seed.log" || { tail -20 "$OUT/seed.log" >&2; exit 1; }
DUMP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seed"]["dump"])' "$OUT/seed.json")
log "fleet: $DUMP; results in $OUT; load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$RUNS"); do
  for b in before after; do
    bin=$BEFORE
    [ "$b" = after ] && bin=$AFTER
    log "run $i of $RUNS: $b ($bin), load $(cut -d' ' -f1-3 /proc/loadavg)"
    FLEETBENCH_MOUNTD=$bin "$HERE/run.sh" "$@" --dump "$DUMP" --json >"$OUT/$b-$i.json" 2>"$OUT/$b-$i.log" \
      || { log "$b run $i failed:"; tail -20 "$OUT/$b-$i.log" >&2; }
  done
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
paths = [("reads.p50Ms",), ("reads.p99Ms",), ("reads.baselineP99Ms",), ("reads.p99Ratio",), ("overview.p99Ms",), ("ingest.reads.p99Ms",)]
def get(d, path):
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d
print("| figure | before (median of %d) | after | after / before |\n|---|---|---|---|" % runs)
for (p,) in paths:
    med = {}
    for b in ("before", "after"):
        vals = []
        for i in range(1, runs + 1):
            try:
                v = get(json.load(open(f"{out}/{b}-{i}.json")), p)
            except (OSError, ValueError):
                v = None
            if v is not None:
                vals.append(v)
        med[b] = statistics.median(vals) if vals else None
    if med["before"] is None and med["after"] is None:
        continue
    ratio = med["after"] / med["before"] if med["before"] and med["after"] is not None else float("nan")
    print(f"| {p} | {med['before']} | {med['after']} | {ratio:.2f} |")
PY
