#!/usr/bin/env bash
# The layers of src/ include only the layers below them (issue 18), as their libraries in
# CMakeLists.txt link only those: a wrong include fails here even where the link would
# still succeed (static libraries resolve at the final link). Public headers (kvpool/) may
# be included anywhere; tests (*_test.cc) may reach further.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [common]="common"
  [keys]="keys common"
  [io]="io common"
  [mem]="mem common"
  [engine]="engine io mem common"
  [net]="net common"
  [cluster]="cluster net common"
  [client]="client cluster engine net common"
  [server]="server engine net common"
  [gpu]="gpu common"
  [workload]="workload engine common"
)
bad=0
for layer in "${!allowed[@]}"; do
  for f in src/"$layer"/*.cc src/"$layer"/*.h src/"$layer"/*.cu; do
    [ -e "$f" ] || continue
    case "$f" in *_test.cc) continue ;; esac
    while IFS= read -r dep; do
      if [[ " ${allowed[$layer]} " != *" $dep "* ]]; then
        echo "$f includes $dep/, which the $layer layer may not (allowed: ${allowed[$layer]})"
        bad=1
      fi
    done < <(sed -n 's|^#include "\([a-z_]*\)/.*|\1|p' "$f" | grep -v '^kvpool$' | sort -u)
  done
done
# Every layer directory is in the table (a new one must say what it may include).
for d in src/*/; do
  d=$(basename "$d")
  [ -n "${allowed[$d]:-}" ] || { echo "src/$d is not in the layer table"; bad=1; }
done
exit $bad
