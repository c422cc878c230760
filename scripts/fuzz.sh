#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 (-fsanitize=fuzzer,address,undefined;
# only core, proto and the server's conversion code) in build-fuzz/, and runs each for SECONDS
# (default 60), reporting executions, executions per second, corpus growth and findings.
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]      targets: rig_upload frame_decode clip upload_sequence
#                                               session_state
#
# Each target starts from the committed seeds (tests/fuzz/corpus/TARGET, read only) and from
# build-fuzz/corpus/TARGET, where it keeps what it found (so later runs go on from there).
# Findings (crashes, sanitizer reports, leaks, timeouts, out-of-memory) are written to
# build-fuzz/findings/TARGET/ and the script exits 1; replay one with
#   build-fuzz/tests/fuzz/sinew-fuzz-TARGET build-fuzz/findings/TARGET/crash-...
# and, once fixed, commit it to tests/fuzz/corpus/TARGET/ as a regression input (the plain
# build's ctest FuzzCorpus.TARGET replays the corpus). Needs scripts/install-deps.sh's clang-14
# and libclang-rt-14-dev. FUZZ_ARGS in the environment adds libFuzzer flags (e.g. -dict=FILE).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
[[ $# -gt 0 ]] && shift
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || (( seconds < 1 )); then
  echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
  exit 2
fi
all=(rig_upload frame_decode clip upload_sequence session_state)
targets=("$@")
(( ${#targets[@]} == 0 )) && targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (${all[*]})" >&2; exit 2; }
done
for tool in clang-14 clang++-14; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
done

build=build-fuzz
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSINEW_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 "${launcher[@]}" >/dev/null
ninja -C "$build" "${targets[@]/#/sinew-fuzz-}"

status=0
report=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t" findings="$build/findings/$t" log="$build/fuzz-$t.log"
  mkdir -p "$corpus" "$findings"
  before=$(find "$findings" -type f | wc -l)
  seeds=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  echo "== $t: ${seconds} s from $seeds seeds (+ $(find "$corpus" -type f | wc -l) kept), log $log"
  set +e
  # -timeout: one input may take this long (a large valid rig's BuildRig). -malloc_limit_mb:
  # an input holds at most 64 KB (-max_len), so one allocation above 256 MB while handling it is
  # memory amplification (issue 17's first defect) and a finding; RSS limit libFuzzer's 2 GB.
  # shellcheck disable=SC2086
  "$build/tests/fuzz/sinew-fuzz-$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=25 \
    -malloc_limit_mb=256 \
    -max_len=65536 -artifact_prefix="$findings/" \
    ${FUZZ_ARGS:-} "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}' || true)
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | awk '{if ($2 > m) m = $2} END {print m + 0}' || true)
  # No "cov:" line when a kept input crashes before libFuzzer's INITED: grep fails, and under
  # pipefail the substitution ended the script before its verdict (until 2026-12-07).
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  new=$(( $(find "$findings" -type f | wc -l) - before ))
  kept=$(find "$corpus" -type f | wc -l)
  verdict="no findings"
  if (( rc != 0 || new > 0 )); then
    status=1
    verdict="FINDING (exit $rc, $new new file(s) in $findings/): $(grep -m1 -E 'ERROR: |runtime error|==ERROR|out-of-memory|timeout' "$log" || echo 'see the log')"
  fi
  report+=("$(printf '%-16s %12s execs %8s/s  cov %6s  corpus %5s  peak RSS %5s MB  %s' "$t" "$execs" "$rate" "${cov:-?}" "$kept" "$rss" "$verdict")")
done
echo
echo "fuzz.sh: ${seconds} s each, $(uptime | sed 's/.*load average/load average/')"
printf '%s\n' "${report[@]}"
exit $status
