#!/usr/bin/env bash
# Quick start, command 2: install, build and run every test: the release suite, the same
# suite under ASan+UBSan, the concurrent parts under TSan, a bounded libFuzzer run of the
# trace parser, and a smoke run of the benchmark. Bounded: ~15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)
export TMPDIR="${TMPDIR:-/tmp}"

echo "== release build and tests"
scripts/build.sh
(cd build && ctest -j"$jobs" --output-on-failure --timeout 300)

echo "== ASan + UBSan"
cmake -S . -B build-asan -DKVPOOL_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs" --target kvpool_tests
ASAN_OPTIONS=detect_leaks=1 build-asan/kvpool_tests --gtest_brief=1

echo "== TSan (index, store concurrency, mover)"
cmake -S . -B build-tsan -DKVPOOL_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-tsan -j"$jobs" --target kvpool_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/kvpool_tests --gtest_brief=1 \
  --gtest_filter='StoreConcurrency.*:TieredStore.*:Index.*:*StoreModelTest*:FaultInjection.*'

echo "== fuzz: trace parser (libFuzzer, 30 s)"
mkdir -p build-fuzz
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc -Itools \
  fuzz/trace_line_fuzz.cc tools/trace.cc src/common/status.cc -o build-fuzz/trace_line_fuzz
cp -r fuzz/corpus/trace build-fuzz/corpus 2>/dev/null || true
build-fuzz/trace_line_fuzz -max_total_time=30 -max_len=4096 build-fuzz/corpus >build-fuzz/log 2>&1 \
  || { tail -40 build-fuzz/log; exit 1; }
tail -1 build-fuzz/log

echo "== benchmark smoke run (figures are not checked here; see docs/PERFORMANCE.md)"
build/kvpool_bench --quick --no-fio --json build/bench-smoke.json --flash-file build/bench-flash.img >/dev/null
build/kvpool replay --quiet --requests 1500 --flash build/replay-smoke.img >/dev/null
rm -f build/bench-flash.img build/replay-smoke.img
echo "all tests passed"
