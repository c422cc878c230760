#!/usr/bin/env bash
# scripts/soak.sh end to end, briefly: 6 s of 2 s intervals at a given capacity (no 20 s
# measurement), each a real sinew-load run against a real server. What is checked is that the
# script gets to its report with intervals measured, frames answered and no errors. Not checked:
# how many intervals fit in the 6 s (each also opens and closes its sessions), and whether so
# short a run meets the RSS drift goal (its exit code may be 0 or 1). Until 2026-12-07 a quoting
# error stopped every run before its first interval, and nothing ran the script.
# Usage: soak_test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d /tmp/sinew-soak-test-XXXXXX)
trap 'rm -rf "$out"' EXIT
rc=0
SINEW_BUILD_DIR=$1 scripts/soak.sh --duration 6 --interval 2 --capacity 100 --fraction 0.5 --sessions 2 \
  --vertices 500 --out "$out" >"$out/stdout.txt" 2>&1 || rc=$?
cat "$out/stdout.txt"
fail() { echo "soak_test: FAIL: $*" >&2; exit 1; }
(( rc == 0 || rc == 1 )) || fail "soak.sh exited $rc"
grep -Eq '^soak: [1-9][0-9]* intervals of sinew-load \(2 sessions x 25\.00 frames/s = 50% of 100 frames/s\)' \
  "$out/report.txt" || fail "the report does not say it measured intervals at 25 frames/s a session"
grep -q 'server alive at the end' "$out/report.txt" || fail "the server did not survive the soak"
grep -Eq '^  frames ok [1-9][0-9]*, errors 0 ' "$out/report.txt" || fail "no frames, or errors"
echo "soak_test: OK (soak.sh exit $rc)"
