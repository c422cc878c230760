#!/usr/bin/env bash
# Builds the whole suite with sanitizers and runs it with ctest.
#
#   scripts/sanitize.sh asan [CTEST_ARGS ...]   AddressSanitizer + LeakSanitizer + UBSan, build-asan/
#   scripts/sanitize.sh tsan [CTEST_ARGS ...]   ThreadSanitizer, build-tsan/
#
# e.g. scripts/sanitize.sh tsan -L 'service|core' or -R 'ThreadPool|Service\.'. GCC's sanitizers
# (Debian's gcc 12: libasan8, libubsan1, libtsan2), RelWithDebInfo, no CUDA (nvcc code is not
# instrumented; the GPU backend's CPU emulation is), no benchmarks. Every program the tests
# start (sinew-server, sinew, sinew-load) is instrumented too; a report from any process is
# written to build-SAN/sanitizer-logs/ (and fails that program: UBSan and TSan halt on the first
# report, ASan always does, LeakSanitizer makes the exit code non-zero), and the script lists
# the reports and exits 1 if there are any, or if a test failed.
#
# Not run under the sanitizers, with the reason (SINEW_SANITIZE_EXCLUDE below):
#   - Lifecycle.UploadsOfManyEmptyEntriesAreRefusedWithoutAmplifyingMemory: asserts the server's
#     resident memory; the sanitizers' allocators (quarantine, shadow memory) change it by design.
#   - FuzzCorpus.* under tsan: single-threaded parsers, nothing for TSan to find (asan runs them).
#   - Backends/ImplicitGpu.CharacterClipEqualsTheCpu/*: over 15 minutes sanitized (a whole
#     character clip of elastic implicit skinning on the emulated device); the smaller
#     ImplicitGpu tests run the same code.
# TSan and the server: Debian's gRPC and Abseil are not instrumented, so TSan cannot see the
# ordering their completion queues and locks give, and reports races in gRPC's inline callback
# code and Abseil's internals (2026-11-27: 100+ reports on the service tests, none with a Sinew
# frame near the top). A TSan run that means something there needs gRPC and Abseil built with
# -fsanitize=thread; the core's threads (thread pool, deformers) do not have that problem.
# GCC's vptr check is off (see asan below); LeakSanitizer ignores leaks allocated inside Debian's
# libassimp (scripts/sanitizer-suppressions/lsan.supp says why).
#   - tests that need a real GPU skip themselves (no CUDA in these builds).
# To sanitize part of the suite faster, build only what it runs, e.g. the service tests:
#   SINEW_SANITIZE_TARGETS="sinew-server sinew sinew-load sinew-service-tests" \
#     scripts/sanitize.sh tsan -L service
# Sanitized programs are 2-15x slower: ctest's per-test timeouts are multiplied by
# SINEW_TIMEOUT_SCALE (asan 3, tsan 6), the test servers' start-up wait by the same.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
# Over 15 minutes under ASan (a whole character clip of elastic implicit skinning on the
# emulated device); the same code runs in the smaller ImplicitGpu tests.
slow='^Backends/ImplicitGpu\.CharacterClipEqualsTheCpu/'
[[ $# -gt 0 ]] && shift
case "$mode" in
  asan)
    # -fno-sanitize=vptr: GCC 12's dynamic-type check miscompiles a call through a pointer to
    # member function (Service::PoolCall::Run read a register it never set and crashed; the same
    # in a 30-line program, also at -O0, while clang 14's UBSan and GCC without vptr run it).
    flags="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    scale=3
    exclude="$slow|^Lifecycle\.UploadsOfManyEmptyEntriesAreRefusedWithoutAmplifyingMemory\$"
    ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    scale=6
    exclude="$slow|^Lifecycle\.UploadsOfManyEmptyEntriesAreRefusedWithoutAmplifyingMemory\$|^FuzzCorpus\."
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [CTEST_ARGS ...]" >&2
    exit 2
    ;;
esac
build=build-$mode
logs=$PWD/$build/sanitizer-logs

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSINEW_CUDA=OFF -DSINEW_BUILD_BENCH=OFF \
  -DSINEW_TIMEOUT_SCALE="$scale" "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
rm -rf "$logs"
mkdir -p "$logs"
common="log_path=$logs/report:print_stacktrace=1"
export ASAN_OPTIONS="$common:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1"
export UBSAN_OPTIONS="$common:halt_on_error=1"
export LSAN_OPTIONS="$common:print_suppressions=0:suppressions=$PWD/scripts/sanitizer-suppressions/lsan.supp"
export TSAN_OPTIONS="$common:halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/sanitizer-suppressions/tsan.supp"
export SINEW_TIMEOUT_SCALE=$scale
# Built with the options set: the build runs the test programs to list their tests.
# SINEW_SANITIZE_TARGETS: build only these targets (a sanitized build of everything takes about
# 40 minutes on 2 cores); the tests of programs not built are not run (give -L to choose). The
# fixture most tests need (the implicit operators' cache, tests/CMakeLists.txt) is built with
# them: without it ctest marks every test that needs it "Not Run" (until 2026-12-06 the example
# above ran nothing).
targets=${SINEW_SANITIZE_TARGETS:-}
[[ -n "$targets" ]] && targets="$targets sinew-test-operator-cache"
# shellcheck disable=SC2086
ninja -C "$build" -j"$(nproc 2>/dev/null || echo 2)" $targets

set +e
(cd "$build" && ctest --output-on-failure -E "$exclude" "$@")
rc=$?
set -e
# A report is a file with a sanitizer's error in it (LeakSanitizer also writes a list of the
# suppressions it used, which is not one).
reports=$(grep -l -r -E 'ERROR: (Address|Leak|Thread|UndefinedBehavior)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$logs" | sort || true)
echo
echo "sanitize.sh $mode: ctest exit $rc; $(echo "$reports" | grep -c . || true) sanitizer report file(s) in $logs"
for r in $reports; do
  echo "--- $r"
  grep -m3 -E 'ERROR|WARNING|runtime error|SUMMARY' "$r" || head -5 "$r"
done
[[ $rc -eq 0 && -z "$reports" ]]
