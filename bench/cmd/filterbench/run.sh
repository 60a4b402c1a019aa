#!/usr/bin/env bash
# Runs filterbench against mountd on a throw-away PostgreSQL and Redis
# (bench/serve.sh). Arguments go to filterbench, e.g. cmd/filterbench/run.sh --explain
exec "$(dirname "$0")/../../serve.sh" filterbench "$@"
