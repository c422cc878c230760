#!/usr/bin/env bash
# Installs dependencies, builds everything (core, server, clients, tests, benchmarks) and runs
# the whole test suite with ctest, as many tests at a time as the machine has cores
# (SINEW_TEST_JOBS overrides; extra arguments go to ctest, e.g. -R Implicit or -j1). Tests
# that need a GPU skip themselves without one. No test depends on timing, so running them side
# by side changes only the wall time (2 cores: about 0.8 of one at a time, 2026-11-29).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "${SINEW_TEST_JOBS:-$(nproc)}" "$@"
