#!/usr/bin/env bash
# The GPU check, one prepared command for a GPU host (an H200 here): usage
#   scripts/gpu-check.sh OUTDIR
# with .gpu-bundle/ from scripts/gpu-bundle.sh beside it (built on the development machine;
# the GPU host has CUDA, Python with torch, transformers and pybind11, but no network).
# Runs the GPU tests (C++ and Python), the move benchmark and the TTFT benchmark, and writes
# into OUTDIR: gpu-check.log (everything printed), gpu-tests.json, bench-gpu.json,
# ttft.json. Bounded: about 5 minutes on an H200. Exit status: 0 when every step passed.
set -uo pipefail
OUT=${1:?usage: scripts/gpu-check.sh OUTDIR}
cd "$(dirname "$0")/.."
B=$PWD/.gpu-bundle
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
: >"$LOG"
fail=0
step() { echo "== $* ($(date +%T))" | tee -a "$LOG"; }
[ -x "$B/kvpoold" ] || { echo "no $B: run scripts/gpu-bundle.sh first" | tee -a "$LOG"; exit 2; }
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1

step "host"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  grep -m1 "model name" /proc/cpuinfo; nproc; uname -r; "$PY" --version
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee -a "$LOG"

# GPU_CHECK_ONLY=ttft skips the tests and the move benchmark (a rerun of the TTFT alone).
if [ "${GPU_CHECK_ONLY:-}" != ttft ]; then
step "C++ GPU tests"
timeout 120 "$B/kvpool_gpu_tests" --gtest_output=json:"$OUT/gpu-tests.json" 2>&1 | tee -a "$LOG" | tail -25 \
  || fail=1

step "move benchmark"
timeout 120 "$B/kvpool_gpu_bench" --json "$OUT/bench-gpu.json" 2>&1 | tee -a "$LOG" || fail=1

fi

step "Python module (built here for this host's Python)"
ext=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
mkdir -p "$B/python/kvpool" /tmp/kvpool-py
cp python/kvpool/*.py "$B/python/kvpool/"
inc="$("$PY" -m pybind11 --includes) -Iinclude -I$B/include"
pids=()
for f in python/*.cc; do
  g++ -O2 -std=c++20 -fPIC -fvisibility=hidden $inc -c "$f" -o "/tmp/kvpool-py/$(basename "$f").o" \
    >>"$LOG" 2>&1 &
  pids+=($!)
done
built=1
for p in "${pids[@]}"; do wait "$p" || built=0; done
if ((built)); then
  g++ -shared -o "$B/python/kvpool/_kvpool$ext" /tmp/kvpool-py/*.o \
    -Wl,--start-group "$B/lib/libkvpool_gpu.a" "$B/lib/libkvpool.a" -Wl,--end-group \
    "$B/lib/libcudart_static.a" -L"$B/lib" -l:liburing.so.2 -l:libisal.so.2 -l:libxxhash.so.0 \
    -l:libcrypto.so.3 -l:libzmq.so.5 -l:libmsgpackc.so.2 -lpthread -ldl -lrt \
    -Wl,-rpath,"$B/lib" >>"$LOG" 2>&1 || built=0
fi
if ((built)); then echo "built $B/python/kvpool/_kvpool$ext" | tee -a "$LOG"; else
  echo "Python module build FAILED (see the log)" | tee -a "$LOG"; fail=1; fi

if ((built)) && [ "${GPU_CHECK_ONLY:-}" != ttft ]; then
  step "Python GPU tests"
  timeout 180 "$PY" tests/gpu_test.py "$B" 2>&1 | tee -a "$LOG" | tail -15 || fail=1
fi
if ((built)); then
  step "TTFT benchmark"
  timeout 420 "$PY" bench/ttft_bench.py --build "$B" --kvpoold "$B/kvpoold" --out "$OUT" \
    ${TTFT_ARGS:-} 2>&1 | tee -a "$LOG" || fail=1
fi
step "done: $([ $fail = 0 ] && echo all passed || echo FAILURES above)"
exit $fail
