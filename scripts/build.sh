#!/usr/bin/env bash
# Configures and builds Sinew (Release) into ./build. Extra arguments go to ninja (targets).
# The CUDA build switches on by itself in a later issue when nvcc is found; today the gpu/
# target is a placeholder.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C build -j"$jobs" "$@"
