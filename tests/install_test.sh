#!/usr/bin/env bash
# An installed kvpool, used the way another project would (issue 18): `cmake --install`
# into a temporary prefix, then a consumer built with find_package(kvpool) and one built
# with pkg-config, both run. The client-only consumer must link no server code, and no
# internal header may be installed. Usage: tests/install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
for internal in engine server common net src; do
  if [ -e "$tmp/prefix/include/$internal" ]; then
    echo "internal headers installed: include/$internal" >&2
    exit 1
  fi
done
ls "$tmp/prefix/include/kvpool/store.h" "$tmp/prefix/bin/kvpoold" >/dev/null

cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
test "$("$tmp/consumer/consumer")" = ok
syms=$(nm -C "$tmp/consumer/consumer")
grep -q "kvpool::engine::TieredStore" <<<"$syms" ||
  { echo "the consumer holds no engine code: the nm check below would prove nothing" >&2; exit 1; }
targets=$(find "$tmp/prefix" -name kvpoolTargets.cmake | head -1)
if awk '/set_target_properties\(kvpool::client /,/^\)/' "$targets" | grep -q "kvpool::server"; then
  echo "kvpool::client depends on kvpool::server" >&2
  exit 1
fi
if grep -q "kvpool::server::" <<<"$syms"; then
  echo "a client-only program linked server code:" >&2
  grep "kvpool::server::" <<<"$syms" | head >&2
  exit 1
fi

pc=$(dirname "$(find "$tmp/prefix" -name kvpool.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs kvpool)
# shellcheck disable=SC2086
g++ -O1 "$src/tests/install/consumer.cc" $flags -o "$tmp/pc-consumer"
test "$("$tmp/pc-consumer")" = ok
echo "install: find_package and pkg-config consumers ok; no server code in a client"
