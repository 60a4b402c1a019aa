#!/usr/bin/env bash
# Fan-out benchmark: builds mountd and fanoutbench into a temp dir, starts
# mountd on 127.0.0.1 (embedded default: SQLite and the in-process event bus;
# and PostgreSQL + Redis through scripts/test-services.sh), waits for
# /readyz, runs fanoutbench against it and the NATS and Mosquitto servers on
# this machine, and stops mountd. Results (text, JSON, mountd log) go to OUT.
#
#   cmd/fanoutbench/run.sh                      # both backends, 1000 subscribers
#   BACKENDS=embedded cmd/fanoutbench/run.sh    # only the embedded default
#
# Environment (defaults in brackets):
#   BACKENDS     embedded and/or postgres+redis        [embedded postgres+redis]
#   SUBSCRIBERS  subscribers per system                [1000]
#   REPORTS      measured messages                     [200]
#   INTERVAL     spacing of the messages               [20ms]
#   SYSTEMS      fanoutbench --systems                 [mountd,nats,mqtt]
#   LOAD_MAX     before each system, wait until the 1-min load
#                is below this and the CPUs ≥ 75% idle  [1.0]
#   LOAD_WAIT    ...in 10 s steps, at most this many s  [600]
#   OUT          results directory                     [a new /tmp/fanoutbench-XXXXXX]
#   PERF=1       also record mountd with `perf record -g` (skews the figures; for
#                finding where the time goes, not for the numbers)
#   EXTRA        more fanoutbench flags
#   MOUNTD       a mountd binary to measure instead of building this tree's
#                (an A/B: the base commit built into /tmp, then this one)
#   MOUNTD_PPROF_LISTEN  with a MOUNTD built with -tags pprof: where it serves
#                pprof; the memory readings then follow a collection
#
# The NATS server (127.0.0.1:4222) and Mosquitto (127.0.0.1:1883) must be
# running; this script only checks that they answer.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BACKENDS=${BACKENDS:-"embedded postgres+redis"}
SUBSCRIBERS=${SUBSCRIBERS:-1000}
REPORTS=${REPORTS:-200}
INTERVAL=${INTERVAL:-20ms}
SYSTEMS=${SYSTEMS:-mountd,nats,mqtt}
LOAD_MAX=${LOAD_MAX:-1.0}
LOAD_WAIT=${LOAD_WAIT:-600}
PERF=${PERF:-0}
EXTRA=${EXTRA:-}

log() { echo "run.sh: $*" >&2; }

# --inner LABEL: called by scripts/test-services.sh with the PostgreSQL and
# Redis URLs in the environment; everything else is inherited.
if [ "${1:-}" = "--inner" ]; then
  INNER_LABEL=$2
else
  INNER_LABEL=""
  OUT=${OUT:-$(mktemp -d /tmp/fanoutbench-XXXXXX)}
  mkdir -p "$OUT"
  export OUT
  BIN=$(mktemp -d /tmp/fanoutbench-bin-XXXXXX)
  export BIN
  trap 'rm -rf "$BIN"' EXIT
  log "building into $BIN"
  if [ -n "${MOUNTD:-}" ]; then
    cp "$MOUNTD" "$BIN/mountd"
  else
    (cd "$ROOT" && go build -o "$BIN/mountd" ./cmd/mountd)
  fi
  (cd "$ROOT/bench" && go build -o "$BIN/fanoutbench" ./cmd/fanoutbench)
fi

# 1000 sockets at each end of the loopback, plus files: raise the soft limit.
want_fds=$(( SUBSCRIBERS * 2 + 1024 ))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want_fds" ]; then
  log "the hard fd limit $hard is below $want_fds; run with fewer SUBSCRIBERS or raise it"; exit 1
fi
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$want_fds" ] || ulimit -n "$want_fds"

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $(( 20000 + RANDOM % 20000 ))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

check_brokers() {
  local hp
  for hp in 127.0.0.1:4222 127.0.0.1:1883; do
    if ! (exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}") 2>/dev/null; then
      log "nothing answers on $hp (NATS: start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222; Mosquitto: mosquitto -d -c /etc/mosquitto/mosquitto.conf)"
      return 1
    fi
  done
}

# bench LABEL DATABASE_URL REDIS_URL: one mountd, one fanoutbench run.
bench() {
  local label=$1 db=$2 redis=$3
  local port data key pid rc=0 perf_pid=""
  port=$(free_port)
  data=$(mktemp -d /tmp/fanoutbench-data-XXXXXX)
  key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  local tag=${label//+/-}
  log "[$label] mountd on 127.0.0.1:$port, data $data"
  MOUNTD_LISTEN=127.0.0.1:$port MOUNTD_DATA_DIR=$data MOUNTD_DATABASE_URL=$db MOUNTD_REDIS_URL=$redis \
    MOUNTD_MASTER_KEY=$key MOUNTD_LOG_LEVEL=warn "$BIN/mountd" serve >"$OUT/mountd-$tag.log" 2>&1 &
  pid=$!
  local ok=0
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$ok" != 1 ]; then
    log "[$label] mountd did not become ready"; cat "$OUT/mountd-$tag.log" >&2
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data"; return 1
  fi
  if [ "$PERF" = 1 ]; then
    perf record -F 499 -g -p "$pid" -o "$OUT/perf-$tag.data" >/dev/null 2>&1 &
    perf_pid=$!
  fi
  local args=(--base "http://127.0.0.1:$port" --mountd-pid "$pid" --mountd-bin "$BIN/mountd"
    --data-dir "$data" --master-key "$key" --label "$label"
    --subscribers "$SUBSCRIBERS" --reports "$REPORTS" --interval "$INTERVAL" --systems "$SYSTEMS"
    --load-max "$LOAD_MAX" --load-wait "${LOAD_WAIT}s" --timeout "$(( LOAD_WAIT * 3 + 900 ))s"
    --json "$OUT/result-$tag.json")
  [ -n "$db" ] && args+=(--database-url "$db")
  # A build with -tags pprof (MOUNTD=...) collects its garbage before each memory reading.
  [ -n "${MOUNTD_PPROF_LISTEN:-}" ] && args+=(--gc-url "http://$MOUNTD_PPROF_LISTEN/debug/freeosmemory")
  # shellcheck disable=SC2086
  "$BIN/fanoutbench" "${args[@]}" $EXTRA 2>&1 | tee "$OUT/result-$tag.txt" || rc=$?
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true
    perf report -i "$OUT/perf-$tag.data" --stdio --no-children --sort symbol 2>/dev/null \
      | grep -E '^ +[0-9]' | head -60 >"$OUT/perf-$tag.txt" || true
  fi
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$data"
  log "[$label] mountd stopped; warnings in its log: $(grep -c 'level=WARN' "$OUT/mountd-$tag.log" || true)"
  return "$rc"
}

if [ -n "$INNER_LABEL" ]; then
  bench "$INNER_LABEL" "$MOUNTD_TEST_DATABASE_URL" "$MOUNTD_TEST_REDIS_URL"
  exit $?
fi

case ",$SYSTEMS," in *,nats,*|*,mqtt,*) check_brokers ;; esac
log "results in $OUT; load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
status=0
for b in $BACKENDS; do
  case $b in
    embedded) bench embedded "" "" || status=1 ;;
    postgres+redis)
      "$ROOT/scripts/test-services.sh" "$ROOT/bench/cmd/fanoutbench/run.sh" --inner postgres+redis || status=1 ;;
    *) log "unknown backend $b"; status=1 ;;
  esac
done
log "results in $OUT"
exit $status
