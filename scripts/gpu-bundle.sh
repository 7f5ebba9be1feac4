#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU host, into .gpu-bundle/ (git-ignored; the
# device tool carries it): kvpoold, the GPU tests and benchmark (CUDA runtime linked
# statically), the static libraries the Python module links on that host, the shared
# libraries that host lacks (liburing, ISA-L, ZeroMQ and theirs), and DLPack's header.
# Built for x86-64-v3 (any AVX2 machine), not this machine's CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
B=.gpu-bundle
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKVPOOL_ARCH=x86-64-v3 >/dev/null
cmake --build build-gpu -j"$(nproc)" --target kvpoold kvpool_gpu_tests kvpool_gpu_bench kvpool_server \
  kvpool_client kvpool_keys kvpool_gpu \
  2>&1 | grep -E "error|Error" || true
test -x build-gpu/kvpool_gpu_tests || { echo "gpu-bundle: build failed" >&2; exit 1; }
rm -rf "$B" && mkdir -p "$B/lib" "$B/include"
for bin in kvpoold kvpool_gpu_tests kvpool_gpu_bench; do
  strip -o "$B/$bin" "build-gpu/$bin"
done
# The layers' libraries as one archive (what the Python module links on that host).
{
  echo "create $B/lib/libkvpool.a"
  for layer in common keys io mem engine net cluster client server; do
    echo "addlib build-gpu/libkvpool_$layer.a"
  done
  echo "save"
  echo "end"
} | ar -M
cp build-gpu/libkvpool_gpu.a "$B/lib/"
strip --strip-debug "$B/lib/libkvpool.a" "$B/lib/libkvpool_gpu.a"
cp "$(dirname "$(readlink -f /usr/local/cuda/bin/nvcc)")/../lib64/libcudart_static.a" "$B/lib/" 2>/dev/null \
  || cp /usr/local/cuda/lib64/libcudart_static.a "$B/lib/"
cp -r /usr/include/dlpack "$B/include/"
# Shared libraries the binaries need, less the C and C++ runtimes every host has.
for bin in "$B/kvpoold" "$B/kvpool_gpu_tests"; do ldd "$bin"; done | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libresolv|ld-linux)[.-]' |
  while read -r lib; do cp -L "$lib" "$B/lib/"; done
for lib in liburing.so.2 libisal.so.2 libxxhash.so.0 libmsgpackc.so.2 libcrypto.so.3; do
  [ -e "$B/lib/$lib" ] || cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$B/lib/" 2>/dev/null || true
done
du -sh "$B"
