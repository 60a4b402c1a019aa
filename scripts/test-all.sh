#!/usr/bin/env bash
# Runs every test of the module, as `go test -race ./...` would, in less
# time on a small machine. The end-to-end tests (e2e/) take most of the
# run, one test after another, each process using about half a core (they
# wait on servers, sockets and timers); they run as E2E_SHARDS processes
# side by side (default 4), while the other packages run with
# `go test -race`. Each process still runs its tests one at a time, so a
# test sees no other test of its process (goroutine counts, metrics).
#
# Tests go to the processes longest first, each to the one with the least
# work so far, by the durations in scripts/e2e-durations.txt (a test not
# listed counts as 10 s). E2E_DURATIONS_WRITE=1 runs the processes
# verbosely and rewrites that file from what they measured: do it when
# tests were added or got much faster or slower.
#
# Run it through scripts/test-services.sh (make test does, with a
# PostgreSQL cluster for each process).
# Usage: scripts/test-all.sh [go]
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${1:-go}
SHARDS=${E2E_SHARDS:-4}
# The end-to-end tests run without the race detector unless E2E_RACE=1:
# under it they cost three times the CPU, and the whole run is CPU-bound on
# two cores. Every other package, where the concurrent code is tested
# piece by piece, runs with -race.
race=()
if [ "${E2E_RACE:-}" = 1 ]; then race=(-race); fi
DURATIONS=scripts/e2e-durations.txt
tmp=$(mktemp -d /tmp/mountd-test-all-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The programs the end-to-end tests run, built once for every process, and
# the end-to-end test binary.
"$GO" build -o "$tmp/programs/" ./cmd/mountd ./cmd/mountctl ./cmd/mountsim &
build=$!
"$GO" test ${race[@]+"${race[@]}"} -c -o "$tmp/e2e.test" ./e2e
wait "$build"
export MOUNTD_TEST_PROGRAMS="$tmp/programs"

# shard$N.list: the tests of process N, longest first to the least loaded.
(cd e2e && "$tmp/e2e.test" -test.list '.*' | grep '^Test') |
  awk -v shards="$SHARDS" -v out="$tmp/shard" '
    NR == FNR { took[$1] = $2; next }
    { n++; name[n] = $1; d[n] = ($1 in took) ? took[$1] : 10 }
    END {
      # insertion sort by duration, longest first (a hundred-odd tests)
      for (i = 2; i <= n; i++) for (j = i; j > 1 && d[j] > d[j-1]; j--) {
        t = d[j]; d[j] = d[j-1]; d[j-1] = t; t = name[j]; name[j] = name[j-1]; name[j-1] = t
      }
      for (i = 1; i <= n; i++) {
        best = 0
        for (s = 1; s < shards; s++) if (load[s] < load[best]) best = s
        load[best] += d[i]
        print name[i] > (out best ".list")
      }
    }' "$DURATIONS" -

# Each test process gets a PostgreSQL cluster of its own when the test
# script started several (TEST_SERVICES_PG_CLUSTERS): visibility in the
# event log waits for every older transaction of the cluster, and busy
# processes on one cluster make the event log's reads lag.
read -ra pg_urls <<<"${MOUNTD_TEST_DATABASE_URLS:-${MOUNTD_TEST_DATABASE_URL:-}}"
pg_url() { # $1: the process's number
  if (( ${#pg_urls[@]} > 0 )); then echo "${pg_urls[$(( $1 % ${#pg_urls[@]} ))]}"; else echo ""; fi
}

verbose=()
if [ "${E2E_DURATIONS_WRITE:-}" = 1 ]; then verbose=(-test.v); fi

shard() { # $1: the shard's number
  local names=()
  [ -f "$tmp/shard$1.list" ] && mapfile -t names <"$tmp/shard$1.list"
  (( ${#names[@]} > 0 )) || return 0
  local re
  re="^($(IFS='|'; echo "${names[*]}"))\$"
  local began=$SECONDS rc=0
  (cd e2e && MOUNTD_TEST_DATABASE_URL=$(pg_url $(($1 + 1))) "$tmp/e2e.test" -test.run "$re" -test.count=1 -test.timeout=20m ${verbose[@]+"${verbose[@]}"}) \
    >"$tmp/shard$1.log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok  	github.com/mountd/mountd/e2e (process $(($1 + 1)) of $SHARDS, ${#names[@]} tests)	$((SECONDS - began))s"
  else
    cat "$tmp/shard$1.log"
    echo "FAIL	github.com/mountd/mountd/e2e (process $(($1 + 1)) of $SHARDS, ${#names[@]} tests)	$((SECONDS - began))s"
  fi
  return $rc
}

pids=()
for ((s = 0; s < SHARDS; s++)); do
  shard "$s" &
  pids+=($!)
done
rc=0
mapfile -t pkgs < <("$GO" list ./... | grep -v '/e2e$')
MOUNTD_TEST_DATABASE_URL=$(pg_url 0) "$GO" test -race -count=1 -timeout 20m "${pkgs[@]}" || rc=$?
for p in "${pids[@]}"; do
  wait "$p" || rc=$?
done

# A test's duration: its own, or, when its subtests ran in parallel (it
# reports ~0 s), its longest subtest's. A test that did not pass keeps the
# duration it had.
if [ "${E2E_DURATIONS_WRITE:-}" = 1 ]; then
  cat "$tmp"/shard*.log | awk '
    /^--- PASS: / { n = $3; gsub(/[()s]/, "", $4); top[n] = $4 + 0 }
    /^    --- PASS: / { split($3, p, "/"); gsub(/[()s]/, "", $4); if ($4 + 0 > sub_[p[1]]) sub_[p[1]] = $4 + 0 }
    END { for (n in top) { d = top[n]; if (d < 0.05 && (n in sub_)) d = sub_[n]; printf "%s %.1f\n", n, d } }' >"$tmp/measured"
  awk 'NR == FNR { d[$1] = $2; next } !($1 in d) { d[$1] = $2 } END { for (n in d) print n, d[n] }' \
    "$tmp/measured" "$DURATIONS" | sort -k2,2nr -k1,1 >"$tmp/durations"
  mv "$tmp/durations" "$DURATIONS"
  echo "wrote $DURATIONS"
fi
exit $rc
