#!/usr/bin/env bash
# Refreshes the GraphiQL page's assets in graph/graphiql/assets from the npm
# registry: the pinned versions below, each file checked against its pinned
# SHA-256 (the Subresource Integrity values gqlgen pins for the same files),
# with each package's licence kept beside it. The assets are committed and
# embedded in the binary, so /graphiql works without internet; only this
# script needs the registry. Usage: scripts/vendor-graphiql.sh
# To move to other versions, change the pins and hashes together.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST="$ROOT/graph/graphiql/assets"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# package@version  file in the package  name here  base64 SHA-256
PINS=(
  "graphiql@4.1.2  package/graphiql.min.js  graphiql.min.js  hnImuor1znlJkD/FOTL3jayfS/xsyNoP04abi8bFJWs="
  "graphiql@4.1.2  package/graphiql.min.css  graphiql.min.css  MEh+B2NdMSpj9kexQNN3QKc8UzMrCXW/Sx/phcpuyIU="
  "react@18.2.0  package/umd/react.production.min.js  react.production.min.js  S0lp+k7zWUMk2ixteM6HZvu8L9Eh//OVrt+ZfbCpmgY="
  "react-dom@18.2.0  package/umd/react-dom.production.min.js  react-dom.production.min.js  IXWO0ITNDjfnNXIu5POVfqlgYoop36bDzhodR6LW5Pc="
)

fetch() { # package@version → tarball in $TMP
  local spec=$1 name=${1%@*} version=${1##*@}
  local tgz="$TMP/${name//\//-}-$version.tgz"
  [ -f "$tgz" ] && { echo "$tgz"; return; }
  curl -fsSL "https://registry.npmjs.org/$name/-/${name##*/}-$version.tgz" -o "$tgz"
  echo "$tgz"
}

mkdir -p "$DEST"
: >"$TMP/VERSIONS"
for pin in "${PINS[@]}"; do
  read -r spec inner file sri <<<"$pin"
  tgz=$(fetch "$spec")
  tar -xzf "$tgz" -C "$TMP" "$inner"
  got=$(openssl dgst -sha256 -binary "$TMP/$inner" | base64)
  if [ "$got" != "$sri" ]; then
    echo "vendor-graphiql: $spec $inner has sha256-$got, pinned sha256-$sri" >&2
    exit 1
  fi
  cp "$TMP/$inner" "$DEST/$file"
  tar -xzf "$tgz" -C "$TMP" package/LICENSE
  cp "$TMP/package/LICENSE" "$DEST/LICENSE-${spec%@*}"
  grep -qx "$spec" "$TMP/VERSIONS" || echo "$spec" >>"$TMP/VERSIONS"
  echo "$file  sha256-$sri" >>"$TMP/SRI"
done
cp "$TMP/VERSIONS" "$DEST/VERSIONS"
cp "$TMP/SRI" "$DEST/SRI"
echo "vendor-graphiql: $(wc -l <"$DEST/VERSIONS") packages into $DEST"
