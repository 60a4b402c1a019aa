#!/usr/bin/env bash
# Runs rolloutbench, with mountsim, against mountd on a throw-away PostgreSQL and Redis (bench/serve.sh); arguments go to rolloutbench.
exec "$(dirname "$0")/../../serve.sh" --mountsim --mountd-env MOUNTD_TOKEN_TTL=6h rolloutbench "$@"
