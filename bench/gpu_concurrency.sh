#!/usr/bin/env bash
# Service frames/s with 1, 10, 100 and 1000 concurrent streaming sessions of a 20k-vertex rig,
# GPU against CPU, on one sinew-server: sinew-load at full speed (--fps 0) for each count and
# backend; prints one table. Run from the repository root after scripts/build.sh.
#   bench/gpu_concurrency.sh [--gpu auto|emulate] [--duration SECONDS] [--counts "1 10 100 1000"]
#                            [--method lbs|dqs|implicit|elastic-implicit] [--server-args "ARGS"]
set -euo pipefail
gpu=auto duration=5 counts="1 10 100 1000" method=lbs server_args=""
while (($#)); do
  case $1 in
    --method) method=$2; shift 2 ;;
    --server-args) server_args=$2; shift 2 ;;
    --gpu) gpu=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --counts) counts=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
log=$(mktemp)
# shellcheck disable=SC2086  # server_args is a list of flags
build/server/sinew-server --listen 127.0.0.1:0 --metrics-listen "" --gpu "$gpu" --max-sessions 5000 $server_args >"$log" 2>&1 &
server=$!
# The server is stopped and waited for: it is gone (its GPU released) when the script returns.
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  grep -q '^grpc listening' "$log" && break
  kill -0 $server 2>/dev/null || break  # exited: no need to wait the 10 s out
  sleep 0.1
done
target=$(sed -n 's/^grpc listening on //p' "$log")
# Without a server every row would read "unavailable" with no reason (until 2026-12-07).
if [[ -z $target ]]; then
  echo "gpu_concurrency: sinew-server did not start (it exited, or no 'grpc listening' line in 10 s); its log:" >&2
  cat "$log" >&2
  exit 1
fi
grep '^sinew-server: gpu' "$log" || true
printf "%-9s %-8s %14s %10s %10s %10s\n" sessions backend frames/s p50_ms p99_ms errors
for n in $counts; do
  for backend in gpu cpu; do
    json=$(build/clients/sinew-load --target "$target" --sessions "$n" --fps 0 --duration "$duration" \
             --backend "$backend" --method "$method" --json - 2>/dev/null | tail -1) || true
    python3 - "$n" "$backend" "$json" <<'PY'
import json, sys
n, backend, raw = sys.argv[1:4]
try:
    j = json.loads(raw)
    print(f"{n:<9} {j['backend']:<8} {j['achieved_frames_per_s']:14.1f} {j['latency_ms']['p50']:10.3f} {j['latency_ms']['p99']:10.3f} {j['errors']:10d}")
except Exception:
    print(f"{n:<9} {backend:<8} {'unavailable':>14}")
PY
  done
done
