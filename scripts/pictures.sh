#!/usr/bin/env bash
# Redraws the README's pictures of the demo character, each through a fresh sinew-server on a
# free loopback port:
#   docs/methods-bcn.png  BCN_Epileptic under LBS, DQS and implicit skinning at frames 37 and 62
#                         of its clip (30 frames/s), tinted where DQS and implicit skinning leave
#                         LBS's surface (`sinew play --snapshot`, the software rasterizer)
#   docs/viewer-bcn.png   the browser viewer playing LBS and implicit bakes side by side, frame 60
#                         (tests/web/viewer_test.py's screenshot from headless Chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh sinew-server sinew >/dev/null
asset=/usr/share/assimp/models/X/BCN_Epileptic.X

log=$(mktemp)
tmp=$(mktemp -d)
build/server/sinew-server --listen 127.0.0.1:0 --metrics-listen "" >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; rm -rf "$log" "$tmp"' EXIT
for _ in $(seq 100); do
  grep -q '^grpc listening on' "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
grpc=$(sed -n 's/^grpc listening on //p' "$log")
build/clients/sinew --target "$grpc" play "$asset" --method lbs,dqs,implicit --clip-fps 30 \
  --snapshot docs/methods-bcn.png --snapshot-frames 37,62 --snapshot-size 440x260 --snapshot-diff 0.02 | grep -v '^  *$'
/usr/bin/python3 tests/web/viewer_test.py --server build/server/sinew-server --cli build/clients/sinew \
  --methods lbs,implicit --out "$tmp" >/dev/null 2>&1
cp "$tmp/viewer-frame-60.png" docs/viewer-bcn.png
ls -l docs/methods-bcn.png docs/viewer-bcn.png
