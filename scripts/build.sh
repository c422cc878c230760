#!/usr/bin/env bash
# Configures and builds Sinew (Release) into ./build, one compile per core. Extra arguments go
# to ninja (targets). The CUDA backend is compiled whenever nvcc is found (also in
# /usr/local/cuda/bin); the common headers are precompiled (SINEW_PCH in CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C build -j"$jobs" "$@"
