#!/usr/bin/env bash
# Runs exportbench against mountd on a throw-away PostgreSQL and Redis
# (bench/serve.sh), with mountd's pid for its peak RSS.
# Arguments go to exportbench, e.g. cmd/exportbench/run.sh --runs 5 --json
exec "$(dirname "$0")/../../serve.sh" --pid exportbench "$@"
