#!/usr/bin/env bash
# Runs a command with a throw-away PostgreSQL and Redis on free ports in a temp
# dir, Debian's Chromium for browser tests and nginx for the deployment test,
# exporting to it:
#   MOUNTD_TEST_DATABASE_URL  postgres://... (an admin URL; tests create their own databases)
#   MOUNTD_TEST_DATABASE_REPLICATED_URL  the admin URL of the cluster the replica streams from
#   MOUNTD_TEST_DATABASE_READ_URL  postgres://... (the same admin URL on a streaming read replica
#                             of that cluster, which replays each commit TEST_SERVICES_REPLICA_DELAY,
#                             default 250ms, late: a read wrongly sent to it sees stale data)
#   MOUNTD_TEST_DATABASE_URLS that URL and, space-separated, one per further cluster
#                             (TEST_SERVICES_PG_CLUSTERS, copies of the first; no replicas)
#   MOUNTD_TEST_REDIS_URL     redis://127.0.0.1:PORT/0 (tests use their own key prefixes)
#   MOUNTD_TEST_REDIS_CLUSTER_URL  redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=... (go-redis's
#                             cluster URL) of a Redis Cluster: 3 masters, 3 replicas
#   MOUNTD_TEST_CHROMIUM      the chromium binary (tests start it headless themselves)
#   MOUNTD_TEST_NGINX         the nginx binary (the test writes its configuration and starts it)
# Installs postgresql, redis-server, chromium and nginx with apt-get when they are
# missing and this runs as root. Every server is stopped on exit, also on failure.
# TEST_SERVICES_PG_OPTIONS adds server options, e.g. for profiling
# "-c shared_preload_libraries=pg_stat_statements" (bench/mountbench.md).
# Usage: scripts/test-services.sh go test ./...
set -euo pipefail

log() { echo "test-services: $*" >&2; }

find_pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(command -v pg_ctl)"; return 0
  fi
  return 1
}

find_chromium() {
  local c
  for c in chromium chromium-browser google-chrome; do
    command -v "$c" >/dev/null && { command -v "$c"; return 0; }
  done
  return 1
}

find_nginx() {
  local c
  for c in nginx /usr/sbin/nginx; do
    command -v "$c" >/dev/null && { command -v "$c"; return 0; }
  done
  return 1
}

install_missing() {
  local pkgs=()
  find_pg_bin >/dev/null || pkgs+=(postgresql)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  find_chromium >/dev/null || pkgs+=(chromium)
  find_nginx >/dev/null || pkgs+=(nginx)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    log "missing ${pkgs[*]} and not root: install them (apt-get install ${pkgs[*]})"; exit 1
  fi
  log "installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Packages must not start their services (nginx on port 80, say): the
  # tests run their own on free ports.
  local policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
  fi
  local rc=0
  { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; } || rc=$?
  [ -n "$policy" ] && rm -f "$policy"
  return $rc
}

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $(( 20000 + RANDOM % 20000 ))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

install_missing
PG_BIN=$(find_pg_bin)
TMP=$(mktemp -d /tmp/mountd-test-XXXXXX)
PG_DATA="$TMP/pg"
PG_SOCK="$TMP/sock"
mkdir -p "$PG_DATA" "$PG_SOCK"
PG_PORT=$(free_port)
REDIS_PORT=$(free_port)
while [ "$REDIS_PORT" = "$PG_PORT" ]; do REDIS_PORT=$(free_port); done

# PostgreSQL refuses to run as root: run it as the postgres user.
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  chown -R postgres "$TMP"
  chmod 700 "$TMP"
  as_pg=(runuser -u postgres --)
fi

REDIS_PID=""
REPLICA_SETUP=""
CLUSTER_PIDS=()
PG_DATAS=()
cleanup() {
  local rc=$? d p
  [ -n "$REPLICA_SETUP" ] && wait "$REPLICA_SETUP" 2>/dev/null || true
  for d in "${PG_DATAS[@]}"; do
    "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 || true
  done
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
  for p in "${CLUSTER_PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  # Reap them before their directory goes.
  for p in "${CLUSTER_PIDS[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
  exit $rc
}
trap cleanup EXIT INT TERM

# start_pg DATA PORT [OPTIONS]: a PostgreSQL cluster in DATA on PORT.
start_pg() {
  PG_DATAS+=("$1")
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$1" -l "$1.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $2 -k $PG_SOCK -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 ${3:-} ${TEST_SERVICES_PG_OPTIONS:-}" \
    start >/dev/null || { cat "$1.log" >&2; exit 1; }
}
"${as_pg[@]}" "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust --no-sync >/dev/null
# TEST_SERVICES_PG_CLUSTERS more clusters, copies of the first (before it
# starts), listed in MOUNTD_TEST_DATABASE_URLS: an event becomes visible
# only when every older transaction of its cluster ended, so test processes
# running side by side each get a cluster of their own (scripts/test-all.sh).
PG_URLS=()
for ((i = 1; i < ${TEST_SERVICES_PG_CLUSTERS:-1}; i++)); do
  "${as_pg[@]}" cp -a "$PG_DATA" "$PG_DATA$i"
  port=$(free_port)
  while [ "$port" = "$PG_PORT" ] || [ "$port" = "$REDIS_PORT" ]; do port=$(free_port); done
  start_pg "$PG_DATA$i" "$port"
  PG_URLS+=("postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable")
done
start_pg "$PG_DATA" "$PG_PORT"

# A streaming read replica of the first cluster (initdb's pg_hba.conf lets
# 127.0.0.1 replicate, and wal_level=replica is the default). It applies
# each commit TEST_SERVICES_REPLICA_DELAY late, on purpose: a read wrongly
# sent to it sees stale data, though it stays well within mountd's default
# MOUNTD_READ_MAX_LAG (1s). hot_standby_feedback keeps the primary's vacuum
# from cancelling its queries; a conflicting lock (a migration, vacuum
# truncating a table) delays replay at most 5 s rather than the default 30 s.
PG_REPLICA="$TMP/pg-replica"
REPLICA_PORT=$(free_port)
while [ "$REPLICA_PORT" = "$PG_PORT" ] || [ "$REPLICA_PORT" = "$REDIS_PORT" ]; do REPLICA_PORT=$(free_port); done
replica_streams() {
  [ "$("${as_pg[@]}" "$PG_BIN/psql" -h 127.0.0.1 -p "$REPLICA_PORT" -U postgres -d postgres -XAtqc \
    "SELECT pg_is_in_recovery() AND EXISTS (SELECT FROM pg_stat_wal_receiver WHERE status = 'streaming')" 2>/dev/null)" = t ]
}
start_replica() {
  "${as_pg[@]}" "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PG_PORT" -U postgres -D "$PG_REPLICA" \
    -R -X stream --checkpoint=fast --no-sync >/dev/null || { log "pg_basebackup failed"; return 1; }
  start_pg "$PG_REPLICA" "$REPLICA_PORT" "-c hot_standby=on -c hot_standby_feedback=on \
    -c recovery_min_apply_delay=${TEST_SERVICES_REPLICA_DELAY:-250ms} -c max_standby_streaming_delay=5s"
  # pg_ctl -w returned once it takes read-only connections; it streams soon after.
  for _ in $(seq 1 200); do
    replica_streams && return 0
    sleep 0.05
  done
  log "the PostgreSQL replica does not stream from the primary"; cat "$PG_REPLICA.log" >&2; return 1
}
# The copy takes most of a second: it runs while Redis starts. Registered
# here, as start_pg's registration stays in the background subshell;
# cleanup waits for the subshell before it stops the clusters.
PG_DATAS+=("$PG_REPLICA")
start_replica &
REPLICA_SETUP=$!

redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
  --dir "$TMP" --logfile "$TMP/redis.log" &
REDIS_PID=$!
for _ in $(seq 1 100); do
  redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
  sleep 0.05
done
redis-cli -p "$REDIS_PORT" ping >/dev/null || { log "redis did not start"; cat "$TMP/redis.log" >&2; exit 1; }

# A Redis Cluster: 6 nodes, 3 masters with a replica each. A node also
# listens on its port + 10000 (the cluster bus); the ports lie in
# 12000-21999, so that bus ports stay below the ephemeral range (32768 up),
# where an outgoing connection could take one between the check and the start.
# Replicas sync at once (a master waits 5 s for more replicas by default).
port_free() {
  if command -v python3 >/dev/null; then
    python3 - "$1" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()
PY
  else
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}
CLUSTER_PORTS=()
while [ ${#CLUSTER_PORTS[@]} -lt 6 ]; do
  port=$(( 12000 + RANDOM % 10000 ))
  [[ " ${CLUSTER_PORTS[*]} " == *" $port "* ]] && continue
  port_free "$port" && port_free $(( port + 10000 )) && CLUSTER_PORTS+=("$port")
done
CLUSTER_ADDRS=()
for port in "${CLUSTER_PORTS[@]}"; do
  mkdir -p "$TMP/redis-cluster/$port"
  redis-server --bind 127.0.0.1 --port "$port" --cluster-enabled yes \
    --cluster-config-file "$TMP/redis-cluster/$port/nodes.conf" --cluster-node-timeout 3000 \
    --save '' --appendonly no --repl-diskless-sync-delay 0 --dir "$TMP/redis-cluster/$port" --logfile "$TMP/redis-cluster/$port/redis.log" &
  CLUSTER_PIDS+=($!)
  CLUSTER_ADDRS+=("127.0.0.1:$port")
done
for port in "${CLUSTER_PORTS[@]}"; do
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
done
redis-cli --cluster create "${CLUSTER_ADDRS[@]}" --cluster-replicas 1 --cluster-yes \
  >"$TMP/redis-cluster/create.log" 2>&1 || { log "redis cluster create failed"; cat "$TMP/redis-cluster/create.log" >&2; exit 1; }
for port in "${CLUSTER_PORTS[@]}"; do
  for _ in $(seq 1 200); do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
    sleep 0.05
  done
  redis-cli -p "$port" cluster info | grep -q '^cluster_state:ok' ||
    { log "redis cluster node :$port is not ok"; redis-cli -p "$port" cluster info >&2; exit 1; }
done
# Replicas that have not synced yet could not take over from their masters.
for _ in $(seq 1 200); do
  synced=0
  for port in "${CLUSTER_PORTS[@]}"; do
    redis-cli -p "$port" info replication 2>/dev/null | grep -q '^master_link_status:up' && synced=$((synced + 1))
  done
  [ "$synced" -eq 3 ] && break
  sleep 0.05
done
[ "$synced" -eq 3 ] || { log "redis cluster replicas did not sync ($synced of 3)"; exit 1; }
cluster_url="redis://${CLUSTER_ADDRS[0]}?"
for addr in "${CLUSTER_ADDRS[@]:1}"; do cluster_url+="addr=$addr&"; done

# A real S3-compatible server (versitygw, built from its Go module in
# tools/s3server) for the S3 blob store tests.
if s3bin=$(bash "$(dirname "$0")/../tools/s3server/build.sh" 2>"$TMP/s3build.log"); then
  export MOUNTD_TEST_S3_SERVER="$s3bin"
else
  log "WARNING: building the S3 test server failed; the S3 adapter tests will skip:"
  tail -5 "$TMP/s3build.log" >&2
fi

export MOUNTD_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
MOUNTD_TEST_DATABASE_URLS="$MOUNTD_TEST_DATABASE_URL ${PG_URLS[*]}"
export MOUNTD_TEST_DATABASE_URLS
wait "$REPLICA_SETUP" || exit 1
REPLICA_SETUP=""
export MOUNTD_TEST_DATABASE_READ_URL="postgres://postgres@127.0.0.1:$REPLICA_PORT/postgres?sslmode=disable"
# The primary the replica streams from: scripts/test-all.sh points each e2e
# shard's MOUNTD_TEST_DATABASE_URL at a cluster of its own.
export MOUNTD_TEST_DATABASE_REPLICATED_URL="$MOUNTD_TEST_DATABASE_URL"
export MOUNTD_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
export MOUNTD_TEST_REDIS_CLUSTER_URL="${cluster_url%&}"
# Headless Chromium for the browser tests (GraphiQL).
MOUNTD_TEST_CHROMIUM=$(find_chromium)
export MOUNTD_TEST_CHROMIUM
MOUNTD_TEST_NGINX=$(find_nginx)
export MOUNTD_TEST_NGINX
# The primary's data directory, binaries and port, for a tool that restarts
# it under load (bench/cmd/soak: pg_ctl restart, as the postgres user when root).
export MOUNTD_TEST_PG_DATA="$PG_DATA" MOUNTD_TEST_PG_BIN="$PG_BIN" MOUNTD_TEST_PG_PORT="$PG_PORT"
# Tests that need these servers fail instead of skipping when this is set.
export MOUNTD_TEST_REQUIRE_SERVICES=1
log "postgres on :$PG_PORT (replica on :$REPLICA_PORT), redis on :$REDIS_PORT, redis cluster on :${CLUSTER_PORTS[*]}"
"$@"
