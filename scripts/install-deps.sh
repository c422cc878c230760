#!/usr/bin/env bash
# Installs every build, test and runtime dependency of Sinew from Debian's packages.
# Used by the README quick start, .ci/run and deploy/Dockerfile. Idempotent.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --runtime  only the shared libraries the server needs to run
#   scripts/install-deps.sh --docs     also what draws the pictures in docs/ (scripts/*.py)
set -euo pipefail

runtime_only=0
docs=0
[[ "${1:-}" == "--runtime" ]] && runtime_only=1
[[ "${1:-}" == "--docs" ]] && docs=1

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

build_pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libtbb-dev libcli11-dev libsuitesparse-dev libcgal-dev
  libssl-dev zlib1g-dev libc-ares-dev libre2-dev
  libassimp-dev assimp-testmodels libtinygltf-dev nlohmann-json3-dev
  python3 procps
  openssl  # the security tests make their own CA and certificates
  haproxy  # the scale-out test balances three servers with deploy/haproxy.cfg
  prometheus  # the Prometheus test scrapes a real server with a generated config
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: clang++-14 -fsanitize=fuzzer (libclang_rt.fuzzer is in libclang-rt-14-dev)
)
runtime_pkgs=(
  libgrpc++1.51 libgrpc29 libprotobuf32 libprometheus-cpp-pull1.0 libprometheus-cpp-core1.0
  libcholmod3 libgmp10 libmpfr6 ca-certificates
  libassimp5  # the sinew command line imports assets (its other libraries come with these)
)

docs_pkgs=(python3-matplotlib python3-numpy)

pkgs=("${build_pkgs[@]}")
(( runtime_only )) && pkgs=("${runtime_pkgs[@]}")
(( docs )) && pkgs+=("${docs_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} == 0 )); then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
