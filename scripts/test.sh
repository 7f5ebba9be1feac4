#!/usr/bin/env bash
# Quick start, command 2: install, build and run every test: the release suite, the same
# suite under ASan+UBSan, the lock annotations under Clang's -Wthread-safety, the concurrent
# parts under TSan, bounded libFuzzer runs of every
# parser (trace lines, protocol frames, RESP, config), and smoke runs of the benchmarks.
# Bounded: ~20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
export TMPDIR="${TMPDIR:-/tmp}"

echo "== release build and tests"
scripts/build.sh
(cd build && ctest -j"$jobs" --output-on-failure --timeout 300)

echo "== lock annotations (Clang -Wthread-safety, errors) over every layer and kvpoold"
CC=clang CXX=clang++ cmake -S . -B build-tsa -DKVPOOL_THREAD_SAFETY=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-tsa -j"$jobs" --target kvpool_common kvpool_keys kvpool_io kvpool_mem \
  kvpool_engine kvpool_net kvpool_cluster kvpool_client kvpool_server kvpool_workload kvpool_gpu kvpoold
# ... and the check is live: a guarded read without its mutex must not compile.
if clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror -Isrc \
    tests/compile/thread_safety_negative.cc 2>/dev/null; then
  echo "tests/compile/thread_safety_negative.cc compiled: the lock annotations are not checked"
  exit 1
fi

echo "== ASan + UBSan"
cmake -S . -B build-asan -DKVPOOL_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs" --target kvpool_tests
ASAN_OPTIONS=detect_leaks=1 build-asan/kvpool_tests --gtest_brief=1

echo "== TSan (index, store concurrency, mover, kvpoold's reactors)"
cmake -S . -B build-tsan -DKVPOOL_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-tsan -j"$jobs" --target kvpool_tests
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/scripts/tsan.supp" build-tsan/kvpool_tests --gtest_brief=1 \
  --gtest_filter='StoreConcurrency.*:TieredStore.*:DramTierPolicy.*:Index.*:*StoreModelTest*:FaultInjection.*:ServerTest.*:PoolTest.*:EtcdTest.*:NearCacheTest.*:ClientDeadlineTest.*:KvEvents.*:OffloadTest.*:ShmCopy.*:ReactorBalance.*:LiveData.*Mover:LiveData.Large*:Metrics.*:TenantQuota.*:FlashHit.*:AllStores/*'

# fuzz NAME SECONDS SOURCES...: build a libFuzzer target with ASan+UBSan and run it for a
# bounded time from its seed corpus (fuzz/corpus/NAME).
fuzz() {
  local name=$1 secs=$2
  shift 2
  echo "== fuzz: $name (libFuzzer, $secs s)"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
    "$@" -o "build-fuzz/$name" -lisal -lxxhash
  rm -rf "build-fuzz/corpus-$name" && cp -r "fuzz/corpus/$name" "build-fuzz/corpus-$name"
  "build-fuzz/$name" -max_total_time="$secs" -max_len=4096 "build-fuzz/corpus-$name" \
    >"build-fuzz/$name.log" 2>&1 || { tail -40 "build-fuzz/$name.log"; exit 1; }
  tail -1 "build-fuzz/$name.log"
}
mkdir -p build-fuzz
fuzz trace 30 fuzz/trace_line_fuzz.cc src/workload/trace.cc src/common/status.cc
fuzz request 30 fuzz/request_fuzz.cc src/net/protocol.cc src/common/crc32c.cc \
  src/common/status.cc src/common/key.cc
fuzz resp 20 fuzz/resp_fuzz.cc src/server/resp_parser.cc
fuzz flash_summary 15 fuzz/flash_summary_fuzz.cc src/engine/flash_summary.cc src/common/crc32c.cc
fuzz config 20 fuzz/config_fuzz.cc src/server/config.cc src/common/units.cc src/common/status.cc \
  src/common/log.cc
fuzz key_file 15 fuzz/key_file_fuzz.cc src/server/sealer.cc src/common/status.cc -lcrypto
fuzz tls 20 fuzz/tls_fuzz.cc src/net/tls.cc src/common/status.cc -lssl -lcrypto
fuzz cluster 20 fuzz/cluster_fuzz.cc src/cluster/http.cc src/cluster/member.cc src/common/base64.cc \
  src/common/units.cc src/common/status.cc src/net/socket.cc src/net/tls.cc -lssl -lcrypto

echo "== benchmark smoke run (figures are not checked here; see docs/PERFORMANCE.md)"
build/kvpool_bench --quick --no-fio --json build/bench-smoke.json --flash-file build/bench-flash.img >/dev/null
build/kvpool replay --quiet --requests 1500 --flash build/replay-smoke.img >/dev/null
build/kvpool bench --quick --work-dir build/net-bench --json build/net-bench-smoke.json >build/net-bench.log \
  || { cat build/net-bench.log; exit 1; }
if grep -q "error:" build/net-bench.log; then cat build/net-bench.log; exit 1; fi
build/kvpool_tenant_bench --rounds 1 --ops 20000 --json build/tenant-bench-smoke.json >/dev/null
rm -f build/bench-flash.img build/replay-smoke.img
echo "all tests passed"
