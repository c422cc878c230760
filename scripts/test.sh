#!/usr/bin/env bash
# Installs dependencies, builds everything (core, server, clients, tests, benchmarks) and runs
# the whole test suite with ctest. Tests that need a GPU skip themselves without one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
