#!/usr/bin/env bash
# Runs jobbench, with mountsim, against mountd on a throw-away PostgreSQL and
# Redis (bench/serve.sh); tokens live 6 h, longer than the run.
# Arguments go to jobbench:
#   cmd/jobbench/run.sh                      # the hour: 1,000 mounts, 10 phones every 6 s, a row every 10 min
#   cmd/jobbench/run.sh --mounts 100 --duration 3m --every 30s   # a trial run
exec "$(dirname "$0")/../../serve.sh" --mountsim --mountd-env MOUNTD_TOKEN_TTL=6h jobbench "$@"
