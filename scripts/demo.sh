#!/usr/bin/env bash
# The main job, end to end on loopback: install dependencies, build, start sinew-server on a
# free port, import a real animated character from Debian's assimp-testmodels (DirectX .x,
# 15k vertices, 58 joints), stream its clip through LBS, DQS and implicit skinning sessions,
# bake the clip to a .pc2 point cache with a batch job, show the procedural limb's candy-wrapper
# and contact test, print what happened, and stop the server with SIGTERM. What there is to look
# at goes to demo-out/ (or $SINEW_DEMO_OUT): a picture of the three methods (methods.png) and the
# clip baked with LBS and implicit skinning as glTF binaries for the browser viewer.
#   scripts/demo.sh [ASSET_FILE]   (default: the BCN_Epileptic character)
set -euo pipefail
# An asset or output folder given relative to where the script was started, not to the repo.
asset=$(realpath -m -- "${1:-/usr/share/assimp/models/X/BCN_Epileptic.X}")
out_given=${SINEW_DEMO_OUT:+$(realpath -m -- "$SINEW_DEMO_OUT")}
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
[[ -n $grpc && -n $metrics ]] || { echo "demo.sh: sinew-server did not say where it listens within 10 s:" >&2; cat "$log" >&2; exit 1; }
echo "== sinew-server: gRPC on $grpc, Prometheus metrics on http://$metrics/metrics"

echo "== sinew info"
build/clients/sinew --target "$grpc" info
out=${out_given:-demo-out}
mkdir -p "$out"
echo "== sinew import $asset"
build/clients/sinew import "$asset"
echo "== sinew play: the character's clip at 30 frames/s: LBS, DQS, implicit skinning, streamed; two frames of each drawn into $out/methods.png"
build/clients/sinew --target "$grpc" play "$asset" --method lbs,dqs,implicit --clip-fps 30 --frames 200 \
  --snapshot "$out/methods.png" --snapshot-frames 37,62 --snapshot-size 440x260 --snapshot-diff 0.02
echo "== sinew batch: the whole clip at 60 frames/s into a point cache"
build/clients/sinew --target "$grpc" batch "$asset" --clip-fps 60 --pc2 "$out/character.pc2" --no-resume
echo "== sinew batch --gltf: the clip at 30 frames/s through LBS and implicit skinning as glTF binaries, each frame's quality measured"
for method in lbs implicit; do
  build/clients/sinew --target "$grpc" batch "$asset" --method $method --clip-fps 30 --gltf "$out/character-$method.glb" --quality --no-resume
done
echo "== sinew play: procedural limb (20k vertices), bend 120 deg + twist 180 deg; LBS, DQS, their 50 % blend, swing/twist deformers, implicit skinning"
build/clients/sinew --target "$grpc" play --method lbs,dqs,blend,swing-twist,implicit --blend-weight 0.5 --frames 240
echo "== sinew play --quality: the same limb's skin measured every frame (vertices inside the skin, volume, edge stretch)"
build/clients/sinew --target "$grpc" play --method dqs,implicit,elastic-implicit --frames 48 --quality

echo "== server metrics (excerpt)"
/usr/bin/python3 - "$metrics" <<'PY' || true
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
for line in body.splitlines():
    if line.startswith(("sinew_frames_total", "sinew_rigs ", "sinew_resident_bytes")) and not line.endswith(" 0"):
        print("  " + line)
PY

kill -TERM $server
code=0
wait $server || code=$?
if [ "$code" -ne 0 ]; then
  echo "== sinew-server exited $code after SIGTERM (a drain exits 0); its log:" >&2
  cat "$log" >&2
  exit 1
fi
echo "== sinew-server drained and exited 0"
cat <<EOF
== to look at: $out/methods.png, the character under LBS, DQS and implicit skinning (any image viewer);
   the two bakes side by side in the browser viewer, served on loopback:
     clients/web/serve.py $out/character-lbs.glb $out/character-implicit.glb
   then open the URL it prints (or pick/drop the .glb files on clients/web/index.html once served);
   $out/character.pc2 is the 60 frames/s point cache (Blender, Maya, 3ds Max read .pc2).
EOF
trap 'rm -f "$log"' EXIT
