#!/usr/bin/env bash
# Soak test: a real sinew-server under steady load for a long time, watching errors, latency
# over time and memory drift.
#
#   scripts/soak.sh [--duration S] [--interval S] [--capacity FRAMES_PER_S] [--fraction F]
#                   [--sessions N] [--vertices N] [--method M] [--server-args "..."] [--out DIR]
#
# 1. Starts build/server/sinew-server on a loopback port picked at run time (plus
#    --server-args), its metrics on another.
# 2. Capacity: unless --capacity is given, runs sinew-load with --sessions streams as fast as
#    answered (--fps 0) for 20 s and takes the frames/s achieved.
# 3. Soak: --fraction (default 0.8) of that capacity, spread over the sessions, for --duration
#    seconds (default 1800), as back-to-back sinew-load runs of --interval seconds (default 60;
#    each opens its sessions, streams and closes them, so session churn is soaked too). After
#    each interval: the frames/s delivered, p50/p99/max latency, errors and frames shed, and the
#    server's resident memory (VmRSS from /proc/PID/status); RSS is also sampled every 5 s.
# 4. Report (stdout and DIR/report.txt, each interval's JSON in DIR): errors in all, p99 per
#    interval and its range, RSS at the end of the first interval (after warm-up) and of the
#    last, and the drift between them. Goals: 0 errors, RSS drift < 5 %. Exit 0 when met, 1 not.
#
# Defaults: 20 sessions of the 20k-vertex procedural limb with LBS; DIR = build/soak-TIMESTAMP.
# The programs are those of the build folder $SINEW_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=1800 interval=60 capacity="" fraction=0.8 sessions=20 vertices=20000 method=lbs server_args="" out=""
while (( $# )); do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --capacity) capacity=$2; shift 2 ;;
    --fraction) fraction=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --vertices) vertices=$2; shift 2 ;;
    --method) method=$2; shift 2 ;;
    --server-args) server_args=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
for v in duration interval sessions vertices; do
  [[ "${!v}" =~ ^[0-9]+$ ]] && (( ${!v} > 0 )) || { echo "soak.sh: --$v must be a positive whole number" >&2; exit 2; }
done
(( interval <= duration )) || { echo "soak.sh: --interval is longer than --duration" >&2; exit 2; }
build=${SINEW_BUILD_DIR:-build}
server=$build/server/sinew-server load=$build/clients/sinew-load
for b in "$server" "$load"; do [[ -x "$b" ]] || { echo "soak.sh: $b not built (scripts/build.sh)" >&2; exit 2; }; done
py=/usr/bin/python3
out=${out:-$build/soak-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

# shellcheck disable=SC2086
"$server" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 $server_args >"$out/server.log" 2>&1 &
server_pid=$!
sampler_pid=""
cleanup() {
  [[ -n "$sampler_pid" ]] && kill "$sampler_pid" 2>/dev/null || true
  kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
}
trap cleanup EXIT
port=""
for _ in $(seq 100); do
  port=$(grep -o 'grpc listening on [^ ]*' "$out/server.log" | sed 's/.*://' || true)
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { echo "soak.sh: the server did not start" >&2; cat "$out/server.log" >&2; exit 1; }
target=127.0.0.1:$port
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || echo 0; }
echo "soak.sh: server pid $server_pid at $target; results in $out; $(uptime | sed 's/.*load average/load average/')"

common=(--target "$target" --sessions "$sessions" --vertices "$vertices" --method "$method")
if [[ -z "$capacity" ]]; then
  "$load" "${common[@]}" --fps 0 --duration 20 --json "$out/capacity.json" >"$out/capacity.txt" 2>&1 || true
  capacity=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["achieved_frames_per_s"])' "$out/capacity.json")
  echo "soak.sh: capacity $capacity frames/s ($sessions sessions as fast as answered, 20 s)"
fi
# A capacity of 0 (nothing answered in the measurement) printed as --fps 0.000, which sinew-load
# reads as "as fast as answered": the opposite of a soak at a fraction (until 2026-12-07).
# (The program is a quoted here-document: as a '...' argument its own quotes ended it, and every
# run stopped here, 2026-12-07.)
fps=$("$py" - "$capacity" "$fraction" "$sessions" "$out/capacity.txt" <<'PY'
import sys
fps = float(sys.argv[1]) * float(sys.argv[2]) / int(sys.argv[3])
if not fps >= 0.001:
    sys.exit(f"soak.sh: {sys.argv[2]} x {sys.argv[1]} frames/s over {sys.argv[3]} sessions is {fps:g} frames/s a session; "
             f"sinew-load paces at 0.001 or more (see {sys.argv[4]})")
print(f"{fps:.6g}")
PY
)
echo "soak.sh: soaking at $fraction x $capacity frames/s = $fps frames/s per session x $sessions for $duration s"

(while kill -0 "$server_pid" 2>/dev/null; do echo "$(date +%s) $(rss_kb)"; sleep 5; done) >"$out/rss.txt" &
sampler_pid=$!
start=$(date +%s)
n=0
printf '%8s %10s %9s %9s %9s %7s %6s %9s\n' "t(s)" "frames/s" "p50 ms" "p99 ms" "max ms" errors shed "RSS MB" | tee "$out/intervals.txt"
while (( $(date +%s) - start + interval <= duration )); do
  n=$((n + 1))
  "$load" "${common[@]}" --fps "$fps" --duration "$interval" --json "$out/interval-$n.json" >"$out/interval-$n.txt" 2>&1 || true
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "soak.sh: the server died during interval $n" | tee -a "$out/intervals.txt"
    break
  fi
  echo "$(rss_kb)" >"$out/interval-$n.rss"
  $py - "$out/interval-$n.json" "$(( $(date +%s) - start ))" "$(rss_kb)" <<'EOF' | tee -a "$out/intervals.txt"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:  # sinew-load failed before writing its report
    print(f"{sys.argv[2]:>8} sinew-load wrote no report ({e})")
    sys.exit(0)
l = j["latency_ms"]
print(f"{sys.argv[2]:>8} {j['achieved_frames_per_s']:10.1f} {l['p50']:9.2f} {l['p99']:9.2f} {l['max']:9.2f} "
      f"{j['errors']:7d} {j['frames_shed']:6d} {int(sys.argv[3]) / 1024:9.1f}")
EOF
done

$py - "$out" "$n" "$capacity" "$fraction" "$sessions" "$fps" "$duration" "$(kill -0 "$server_pid" 2>/dev/null && echo alive || echo dead)" <<'EOF' | tee "$out/report.txt"
import json, os, sys, statistics
out, n, capacity, fraction, sessions, fps, duration, alive = sys.argv[1:]
n = int(n)
runs, missing = [], 0
for i in range(1, n + 1):
    try:
        runs.append((i, json.load(open(f"{out}/interval-{i}.json")), int(open(f"{out}/interval-{i}.rss").read())))
    except Exception:
        missing += 1
errors = sum(r["errors"] for _, r, _ in runs) + missing
shed = sum(r["frames_shed"] for _, r, _ in runs)
frames = sum(r["frames_ok"] for _, r, _ in runs)
p99 = [r["latency_ms"]["p99"] for _, r, _ in runs]
rss = [kb for _, _, kb in runs]
samples = [int(l.split()[1]) for l in open(f"{out}/rss.txt") if len(l.split()) == 2 and l.split()[1] != "0"]
print(f"soak: {len(runs)} intervals of sinew-load ({sessions} sessions x {float(fps):.2f} frames/s = "
      f"{float(fraction):.0%} of {float(capacity):.0f} frames/s), {duration} s asked; server {alive} at the end")
print(f"  frames ok {frames}, errors {errors} (intervals without a report count as one each: {missing}), shed {shed}")
if p99:
    print(f"  p99 per interval: first {p99[0]:.2f} ms, last {p99[-1]:.2f} ms, median {statistics.median(p99):.2f}, "
          f"min {min(p99):.2f}, max {max(p99):.2f} ms")
drift = None
if len(rss) >= 2:
    drift = (rss[-1] - rss[0]) / rss[0]
    print(f"  RSS after interval 1 {rss[0] / 1024:.1f} MB, after the last {rss[-1] / 1024:.1f} MB: drift {drift:+.2%}; "
          f"5 s samples min {min(samples) / 1024:.1f} MB, max {max(samples) / 1024:.1f} MB")
ok = errors == 0 and alive == "alive" and drift is not None and abs(drift) < 0.05
print(f"  goals (0 errors, RSS drift < 5 %): {'met' if ok else 'NOT met'}")
sys.exit(0 if ok else 1)
EOF
