#!/usr/bin/env bash
# Runs every test of the module with -race, as `go test -race ./...` would,
# in less time on a small machine: the end-to-end tests (e2e/) take most
# of the run, one test after another, using about
# one core; they run as two processes side by side, each with every other
# test of the list, while the other packages run with `go test`. Each
# process still runs its tests one at a time, so a test sees no other test
# of its process (goroutine counts, metrics).
# Run it through scripts/test-services.sh (make test does).
# Usage: scripts/test-all.sh [go]
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${1:-go}
SHARDS=2
tmp=$(mktemp -d /tmp/mountd-test-all-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The programs the end-to-end tests run, built once for every shard, and
# mountd's test binary.
"$GO" build -o "$tmp/programs/" ./cmd/mountd ./cmd/mountctl ./cmd/mountsim &
build=$!
"$GO" test -race -c -o "$tmp/e2e.test" ./e2e
wait "$build"
export MOUNTD_TEST_PROGRAMS="$tmp/programs"

mapfile -t tests < <(cd e2e && "$tmp/e2e.test" -test.list '.*' | grep '^Test')

# Each test process gets a PostgreSQL cluster of its own when the test
# script started several (TEST_SERVICES_PG_CLUSTERS): visibility in the
# event log waits for every older transaction of the cluster, and three
# busy processes on one cluster made reads after writes miss.
read -ra pg_urls <<<"${MOUNTD_TEST_DATABASE_URLS:-${MOUNTD_TEST_DATABASE_URL:-}}"
pg_url() { # $1: the process's number
  if (( ${#pg_urls[@]} > 0 )); then echo "${pg_urls[$(( $1 % ${#pg_urls[@]} ))]}"; else echo ""; fi
}

shard() { # $1: the shard's number
  local names=() i
  for i in "${!tests[@]}"; do
    if (( i % SHARDS == $1 )); then names+=("${tests[$i]}"); fi
  done
  local re
  re="^($(IFS='|'; echo "${names[*]}"))\$"
  local began=$SECONDS rc=0
  (cd e2e && MOUNTD_TEST_DATABASE_URL=$(pg_url $(($1 + 1))) "$tmp/e2e.test" -test.run "$re" -test.count=1 -test.timeout=20m) \
    >"$tmp/shard$1.log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok  	github.com/mountd/mountd/e2e (shard $1 of $SHARDS, ${#names[@]} tests)	$((SECONDS - began))s"
  else
    cat "$tmp/shard$1.log"
    echo "FAIL	github.com/mountd/mountd/e2e (shard $1 of $SHARDS, ${#names[@]} tests)	$((SECONDS - began))s"
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
exit $rc
