#!/usr/bin/env bash
# The GPU checks for a lent machine that has a GPU but not this repository's build dependencies.
#
#   scripts/gpu-check.sh bundle          here, after scripts/build.sh with nvcc: the test, bench,
#                                        server and client binaries (stripped), the shared
#                                        libraries they load (libcuda excepted) and the test
#                                        assets, packed into .device/bundle.tar.xz (ignored by git)
#   scripts/gpu-check.sh run [STEP...]   on the GPU machine, from the repository root with the
#                                        bundle carried: unpacks it, points build/, the shared
#                                        data and assimp's models at it, runs the steps (default:
#                                        quick) and writes one log per step to $OUT (or
#                                        gpu-check-out/), printing each step's summary
#
# Steps (each under its own timeout, in seconds):
#   gputests    every CUDA instance of sinew-gpu-tests but the character clip, and the CUDA device
#               against its emulation bit for bit (200)
#   gpuclip     BCN_Epileptic's clip on the device against the CPU, both implicit methods (200)
#   service     sinew-service-tests' GpuService CUDA instances (150)
#   benchgpu    sinew-bench-gpu: LBS / DQS / swing-twist throughput over memcpy (60)
#   benchimpl   sinew-bench-implicit --quick --gpu-only (330: it ran past 150 s on an H200, 2026-12-04)
#   memcheck    compute-sanitizer memcheck + leak check on the implicit and PBS tests (200; under it
#               ElasticReturnsToRest took 30 s and ElasticLoopsThatEndEarly more than 170 s on an
#               H200, 2026-12-04, so the latter is left out)
#   racecheck   compute-sanitizer racecheck on a few implicit and PBS tests (150)
#   kernels     ncu's time per kernel of the elastic program's first 2 500 kernels with separate
#               passes (ElasticChainedStagesEqualSeparatePasses runs that session first in each
#               frame; ncu runs each kernel alone, caches flushed, clocks at base: upper bounds).
#               Under ncu the rest of the test runs about 20x slower (64 s on an H200, 2026-12-04)
#               and the summary prints at exit, hence 150 s
#   chainkernels  the same for the chained CG kernel alone (its first 300; not yet run on a GPU)
#   quick       gputests service benchgpu (about 5 minutes on an H200; benchimpl, up to 330 s, goes
#               in a call of its own: a command on the lent machine may run 600 s)
#   all         every step (about 20 minutes: split it over calls)
set -euo pipefail
cd "$(dirname "$0")/.."
R=$PWD
B=$R/.device/b
failed=()  # the steps that exited non-zero (or timed out)

bundle() {
  rm -rf "$B"
  mkdir -p "$B/lib" "$B/data" "$B/models/X"
  local bins=(tests/sinew-gpu-tests tests/sinew-service-tests server/sinew-server clients/sinew clients/sinew-load
              bench/sinew-bench-gpu bench/sinew-bench-implicit)
  for b in "${bins[@]}"; do
    [ -x "build/$b" ] || { echo "build/$b missing: run scripts/build.sh first" >&2; exit 1; }
    mkdir -p "$B/build/$(dirname "$b")"
    strip -o "$B/build/$b" "build/$b"
  done
  for b in "${bins[@]}"; do ldd "build/$b"; done | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libcuda)\.so' | while read -r l; do
      cp -L "$l" "$B/lib/"
    done
  cp -r ../shared/data/supercages-arm "$B/data/" 2>/dev/null || echo "no ../shared/data/supercages-arm: the Arm's tests will skip"
  cp /usr/share/assimp/models/X/BCN_Epileptic.X "$B/models/X/" 2>/dev/null || echo "no assimp-testmodels: the clip test will skip"
  # The tests find the shared data by the source directory they were built in.
  pwd > "$B/source_dir"
  tar -C .device -cJf .device/bundle.tar.xz b
  du -sh .device/bundle.tar.xz
}

summary() {  # the lines of a log worth reading
  grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|hazard|Invalid|elastic over|implicit,|÷|frames/s|ms a|^\[ +(OK|FAILED|SKIPPED) |^\[  (PASSED|FAILED)|Failure|rc=|Invocations|gpu__time_duration' "$1" | head -80 || true
}

step() {
  local name=$1 limit=$2
  shift 2
  echo
  echo "=== $name ($(date +%T))"
  local rc=0
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  echo "rc=$rc" >> "$OUT/$name.log"
  (( rc == 0 )) || failed+=("$name (rc=$rc)")
  summary "$OUT/$name.log"
}

run() {
  [ -f .device/bundle.tar.xz ] || { echo ".device/bundle.tar.xz missing: carry it (scripts/gpu-check.sh bundle)" >&2; exit 1; }
  if [ -f build/CMakeCache.txt ] && [ ! -L build ]; then
    echo "build/ is a build tree here: 'run' replaces it with the bundle's, so it runs on the lent machine only" >&2
    exit 1
  fi
  tar -xJf .device/bundle.tar.xz -C .device
  export LD_LIBRARY_PATH=$B/lib PATH=/usr/local/cuda/bin:$PATH
  # The binaries look for SOURCE/../shared/data and /usr/share/assimp/models (compiled in).
  local src
  src=$(cat "$B/source_dir")
  if [ "$src" != "$R" ] && [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")"
    ln -sfn "$R" "$src"
  fi
  mkdir -p "$(dirname "$src")/shared" /usr/share/assimp
  [ -e "$(dirname "$src")/shared/data" ] || ln -sfn "$B/data" "$(dirname "$src")/shared/data"
  [ -e /usr/share/assimp/models ] || ln -sfn "$B/models" /usr/share/assimp/models
  rm -rf build
  ln -sfn "$B/build" build
  OUT=${OUT:-$R/gpu-check-out}
  mkdir -p "$OUT"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  echo "cores $(nproc), $(uptime)"
  local steps=("$@")
  [ ${#steps[@]} -gt 0 ] || steps=(quick)
  local expanded=()
  for s in "${steps[@]}"; do
    case $s in
      quick) expanded+=(gputests service benchgpu) ;;
      all) expanded+=(gputests gpuclip service benchgpu benchimpl memcheck racecheck) ;;
      *) expanded+=("$s") ;;
    esac
  done
  local T=build/tests/sinew-gpu-tests
  for s in "${expanded[@]}"; do
    case $s in
      gputests) step gputests 200 "$T" --gtest_filter='*/Cuda:ImplicitCudaAndEmulation.*:-*CharacterClipEqualsTheCpu*' ;;
      gpuclip) step gpuclip 200 "$T" --gtest_filter='*CharacterClipEqualsTheCpu*/Cuda' ;;
      service) step service 150 build/tests/sinew-service-tests --gtest_filter='Devices/GpuService.*/Cuda' ;;
      benchgpu) step benchgpu 60 build/bench/sinew-bench-gpu ;;
      benchimpl) step benchimpl 330 build/bench/sinew-bench-implicit --quick --gpu-only ;;
      memcheck) step memcheck 200 compute-sanitizer --tool memcheck --leak-check full "$T" \
          --gtest_filter='*HistoryIndependentDependsOnlyOnThePose*/Cuda:*ElasticReturnsToRest*/Cuda:*DeviceMemoryIsAccounted*/Cuda:*MalformedFramesFail*/Cuda:*PbsGpu*/Cuda' ;;
      racecheck) step racecheck 150 compute-sanitizer --tool racecheck "$T" \
          --gtest_filter='*HistoryIndependentDependsOnlyOnThePose*/Cuda:*ElasticReturnsToRest*/Cuda:*PbsGpu.SessionsShare*/Cuda' ;;
      kernels) step kernels 150 ncu --metrics gpu__time_duration.sum -k regex:Implicit --launch-count 2500 \
          --print-summary per-kernel "$T" --gtest_filter='*ElasticChainedStagesEqualSeparatePasses*/Cuda' ;;
      chainkernels) step chainkernels 150 ncu --metrics gpu__time_duration.sum --kernel-name-base demangled \
          -k 'regex:ChainKernel.*CgUpdate' --launch-count 300 --print-summary per-kernel "$T" \
          --gtest_filter='*ElasticChainedStagesEqualSeparatePasses*/Cuda' ;;
      *) echo "unknown step $s" >&2; exit 2 ;;
    esac
  done
  echo
  echo "=== done ($(date +%T)); logs in $OUT"
  # Every step runs whatever the others did; the exit status says whether any failed.
  if (( ${#failed[@]} )); then
    echo "=== failed: ${failed[*]}"
    exit 1
  fi
}

case ${1:-} in
  bundle) bundle ;;
  run) shift; run "$@" ;;
  *) sed -n '2,/^set -euo pipefail/{/^set/!p}' "$0"; exit 2 ;;
esac
