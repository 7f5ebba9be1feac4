#!/bin/bash
# The cost of being scraped (issue 21): 64 KiB gets through kvpoold (8 clients, one item per
# request, `kvpool bench`) with its /metrics endpoint scraped every second by a persistent
# HTTP client, and without. Rounds alternate the two; each run gets its own metrics port.
# Usage: bench/metrics_cost.sh [ROUNDS] (from the repository root, after a build)
set -euo pipefail
rounds=${1:-4}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq 1 "$rounds"); do
  for mode in off on; do
    port=$((18000 + round * 2)); [ "$mode" = on ] && port=$((port + 1))
    scraper=
    if [ "$mode" = on ]; then
      /usr/bin/python3 -c "
import time, urllib.request
while True:
    try: urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=2).read()
    except Exception: pass
    time.sleep(1)" &
      scraper=$!
    fi
    ./build/kvpool bench --targets kvpool --suite sweep --sizes 64K --clients 8 --batch 1 \
      --seconds 4 --kvpoold-args "--metrics-listen 127.0.0.1:$port" > "$out/run.txt" 2>&1 || true
    [ -n "$scraper" ] && kill "$scraper"
    echo "round $round scrape=$mode items/s,p99us,p99.9us: $(grep 'get  64' "$out/run.txt" | tr -s ' ' | cut -d' ' -f7,10,11)"
  done
done
