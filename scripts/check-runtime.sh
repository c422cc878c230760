#!/usr/bin/env bash
# Checks that the built binaries run with only the runtime packages, as the Dockerfiles' runtime
# stages install them (deploy/Dockerfile, deploy/Dockerfile.cuda): a bare Debian 12 root made with
# debootstrap (--variant=minbase, close to debian:bookworm-slim) gets `scripts/install-deps.sh
# --runtime` and build/{server/sinew-server,clients/sinew,clients/sinew-load}; then, inside it,
# no library is missing (ldd), `sinew-server --version` answers, the server starts on loopback
# (and says why its GPU backend is off where the root has no driver), `sinew info`, `sinew play`
# (the procedural limb, LBS and DQS) and `sinew-load` run against it, and SIGTERM stops it with
# exit status 0.
#
#   sudo scripts/check-runtime.sh          # after scripts/build.sh
#
# Needs root (debootstrap, chroot, mounts) and Debian's package mirror (the one this machine's
# apt uses); installs debootstrap if it is missing. The base root is cached in
# /tmp/sinew-runtime-base.tar; the checked root is made anew each run in /tmp/sinew-runtime-root.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "check-runtime: run as root (debootstrap, chroot)" >&2; exit 2; }
bins=(build/server/sinew-server build/clients/sinew build/clients/sinew-load)
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "check-runtime: $b missing: run scripts/build.sh first" >&2; exit 2; }
done

base=/tmp/sinew-runtime-base.tar
root=/tmp/sinew-runtime-root
if [[ ! -f $base ]]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [[ -n $mirror ]] || mirror=$(awk '$1=="deb" && $2 ~ /\/debian$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [[ -n $mirror ]] || mirror=http://deb.debian.org/debian
  echo "check-runtime: debootstrap bookworm (minbase) from $mirror"
  rm -rf $root.tmp && mkdir -p $root.tmp
  debootstrap --variant=minbase bookworm $root.tmp "$mirror" >/tmp/sinew-runtime-debootstrap.log 2>&1 ||
    { echo "check-runtime: debootstrap failed, see /tmp/sinew-runtime-debootstrap.log" >&2; exit 1; }
  tar -C $root.tmp -cf $base . && rm -rf $root.tmp
fi
# Nothing of a previous run may stay mounted in the root: `rm -rf` goes into a bind mount, and a
# /dev left mounted there (a run whose server outlived its chroot: umount failed EBUSY, silently)
# would have had the host's device nodes deleted (until 2026-12-03).
release_root() {
  local p
  for p in /proc/[0-9]*; do  # processes still running in the root (a server the chroot left behind)
    [[ $(readlink "$p/root" 2>/dev/null) == "$root" ]] && kill -KILL "${p##*/}" 2>/dev/null || true
  done
  local m
  for m in $root/dev $root/proc; do
    if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m"; fi
  done
  if grep -q " $root/" /proc/mounts; then
    echo "check-runtime: something is still mounted under $root; not removing it:" >&2
    grep " $root/" /proc/mounts >&2
    return 1
  fi
}
release_root
rm -rf --one-file-system $root && mkdir -p $root && tar -C $root -xf $base
cp /etc/resolv.conf $root/etc/resolv.conf 2>/dev/null || true
mkdir -p $root/opt/sinew/bin
cp scripts/install-deps.sh $root/opt/sinew/
cp "${bins[@]}" $root/opt/sinew/bin/
mount -t proc proc $root/proc
mount --bind /dev $root/dev
trap release_root EXIT

chroot $root /bin/bash -s <<'EOF'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PATH=/opt/sinew/bin:/usr/sbin:/usr/bin:/sbin:/bin
/opt/sinew/install-deps.sh --runtime >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
echo "check-runtime: $(dpkg-query -W -f='${binary:Package}\n' | wc -l) packages in the root after install-deps.sh --runtime"
fail=0
for b in /opt/sinew/bin/*; do
  if ldd "$b" | grep "not found"; then echo "check-runtime: FAIL: $b misses libraries"; fail=1; fi
  if ldd "$b" | grep -q libcuda; then echo "check-runtime: FAIL: $b links a CUDA library"; fail=1; fi
done
sinew-server --version
sinew-server --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 </dev/null >/tmp/server.out 2>/tmp/server.err &
pid=$!
trap 'kill -KILL $pid 2>/dev/null || true' EXIT  # a failed step below leaves no server holding /dev
for _ in $(seq 100); do grep -q "grpc listening" /tmp/server.out 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^grpc listening on .*:\([0-9]*\)$/\1/p' /tmp/server.out)
[[ -n $port ]] || { echo "check-runtime: FAIL: the server did not start"; cat /tmp/server.err; exit 1; }
grep "gpu:" /tmp/server.err || true
# (A failing info fails the check: as `a && b` under set -e it was passed over, 2026-12-07.)
if sinew --target 127.0.0.1:$port info >/tmp/info.out; then
  echo "check-runtime: sinew info: $(grep -c . /tmp/info.out) lines"
else
  echo "check-runtime: FAIL: sinew info"; fail=1
fi
sinew --target 127.0.0.1:$port play --method lbs,dqs --frames 30 --fps 0 | tail -4
sinew-load --target 127.0.0.1:$port --sessions 2 --fps 30 --duration 2 --vertices 2000 | tail -4
kill -TERM $pid
status=0; wait $pid || status=$?
echo "check-runtime: sinew-server exited with status $status after SIGTERM"
[[ $status -eq 0 && $fail -eq 0 ]] && echo "check-runtime: OK" || { echo "check-runtime: FAIL"; exit 1; }
EOF
