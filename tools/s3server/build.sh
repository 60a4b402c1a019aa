#!/usr/bin/env bash
# Builds the real S3-compatible server used by the tests of adapters/blob/s3
# (versitygw, pinned in this module's go.mod) and prints the binary's path.
#
#   bash tools/s3server/build.sh            # -> $(go env GOCACHE)/../mountd-s3server/versitygw
#   MOUNTD_TEST_S3_SERVER=$(bash tools/s3server/build.sh) go test ./adapters/blob/s3/
#
# The tests also find the binary at that default path without the variable.
# OUT overrides the output path. The build is skipped when the binary is
# newer than this module's go.mod and go.sum.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
out="${OUT:-$(go env GOCACHE)/../mountd-s3server/versitygw}"
mkdir -p "$(dirname "$out")"
if [[ ! -x "$out" || go.mod -nt "$out" || go.sum -nt "$out" ]]; then
	GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out.tmp" github.com/versity/versitygw/cmd/versitygw >&2
	mv "$out.tmp" "$out"
fi
echo "$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
