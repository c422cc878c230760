#!/usr/bin/env bash
# The main job, end to end on loopback: install dependencies, build, start sinew-server on a
# free port, upload the procedural character (a 20k-vertex limb with 3 bones and smooth
# weights), stream its bend-and-twist clip through LBS and DQS sessions, print what happened,
# and stop the server with SIGTERM.
#   scripts/demo.sh [extra `sinew play` flags, e.g. --frames 600 --fps 60]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh sinew-server sinew

log=$(mktemp)
build/server/sinew-server --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  grep -q '^metrics listening on' "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
grpc=$(sed -n 's/^grpc listening on //p' "$log")
metrics=$(sed -n 's/^metrics listening on //p' "$log")
echo "== sinew-server: gRPC on $grpc, Prometheus metrics on http://$metrics/metrics"

echo "== sinew info"
build/clients/sinew --target "$grpc" info
echo "== sinew play: procedural limb, LBS then DQS, streamed"
build/clients/sinew --target "$grpc" play --method lbs,dqs --frames 480 "$@"

echo "== server metrics (excerpt)"
python3 - "$metrics" <<'PY' || true
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
for line in body.splitlines():
    if line.startswith(("sinew_frames_total", "sinew_rigs ", "sinew_resident_bytes")):
        print("  " + line)
PY

kill -TERM $server
wait $server && echo "== sinew-server drained and exited 0"
trap 'rm -f "$log"' EXIT
