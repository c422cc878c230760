#!/usr/bin/env bash
# Installs every build, test and runtime dependency of Sinew from Debian's packages.
# Used by the README quick start, .ci/run and deploy/Dockerfile. Idempotent.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --runtime  only the shared libraries the server needs to run
#   scripts/install-deps.sh --docs     also what draws the pictures in docs/ (scripts/*.py)
#   scripts/install-deps.sh --no-test-tools   build dependencies without the programs and data
#                                      only the test suite drives (test_tools below: Blender alone
#                                      is ~630 MiB); for builds that run no tests, such as the
#                                      Docker images' build stages. SINEW_NO_TEST_TOOLS=1 does the same.
#   Flags combine (e.g. --no-test-tools --docs). The default (CI, the README quick start) installs
#   everything.
set -euo pipefail

runtime_only=0
docs=0
no_test_tools=0
[[ "${SINEW_NO_TEST_TOOLS:-0}" == "1" ]] && no_test_tools=1
for arg in "$@"; do
  case "$arg" in
    --runtime) runtime_only=1 ;;
    --docs) docs=1 ;;
    --no-test-tools) no_test_tools=1 ;;
    *) echo "install-deps: unknown flag $arg (--runtime, --docs, --no-test-tools)" >&2; exit 2 ;;
  esac
done

SUDO=""
# sudo's env_reset drops DEBIAN_FRONTEND: it is passed through env (until 2026-12-07 apt under
# sudo could stop at a debconf question).
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo env DEBIAN_FRONTEND=noninteractive"; fi

build_pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libtbb-dev libcli11-dev libsuitesparse-dev libcgal-dev
  libopenblas0-serial  # CHOLMOD's dense kernels (core/swingtwist/sparse.h); not the pthreads build, which stops the metrics server
  libssl-dev zlib1g-dev libc-ares-dev libre2-dev
  libassimp-dev assimp-testmodels libtinygltf-dev nlohmann-json3-dev
  python3 procps
  openssl  # the security tests make their own CA and certificates
  haproxy  # the scale-out test balances three servers with deploy/haproxy.cfg
  python3-grpcio python3-protobuf python3-numpy  # the Python client (clients/python) and its tests
  blender  # the Blender add-on (clients/blender) is tested headless in real Blender (bookworm: 3.4.1)
  chromium python3-websocket python3-pil  # the browser viewer's test: headless Chromium driven over DevTools, screenshots read
  prometheus  # the Prometheus test scrapes a real server with a generated config
  python3-yaml  # tests/deploy: the Kubernetes and Compose files read against sinew-server --help
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: clang++-14 -fsanitize=fuzzer (libclang_rt.fuzzer is in libclang-rt-14-dev)
)
runtime_pkgs=(
  libgrpc++1.51 libgrpc29 libprotobuf32 libprometheus-cpp-pull1.0 libprometheus-cpp-core1.0
  libcholmod3 libgmp10 libmpfr6 ca-certificates
  libopenblas0-serial  # CHOLMOD's dense kernels: swing-twist's precompute up to 3x faster than on the reference BLAS
  libassimp5  # the sinew command line imports assets (its other libraries come with these)
)

docs_pkgs=(python3-matplotlib python3-numpy)

# In build_pkgs only for the test suite (programs it runs, data it reads, the Python client's
# tests): neither configuring nor building the server and command lines needs them.
# --no-test-tools leaves them out. A new test-only package goes here too.
test_tools=(blender haproxy openssl assimp-testmodels python3-grpcio python3-protobuf python3-numpy
            chromium python3-websocket python3-pil prometheus python3-yaml clang-14 libclang-rt-14-dev)

pkgs=("${build_pkgs[@]}")
if (( no_test_tools )); then
  pkgs=()
  for p in "${build_pkgs[@]}"; do
    [[ " ${test_tools[*]} " == *" $p "* ]] || pkgs+=("$p")
  done
fi
(( runtime_only )) && pkgs=("${runtime_pkgs[@]}")
(( docs )) && pkgs+=("${docs_pkgs[@]}")

# The browser viewer's three.js and the glTF validator its tests run, pinned by
# clients/web/package-lock.json, from the npm registry into clients/web/node_modules (ignored by
# git). Debian's nodejs and npm are installed where there is no npm.
# --no-test-tools skips them (nothing is built from them; the images do not serve the viewer).
web_deps() {
  (( runtime_only || no_test_tools )) && return 0
  local web
  web="$(cd "$(dirname "$0")/../clients/web" && pwd)"
  if ! command -v npm >/dev/null; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
  fi
  if [[ ! "$web/node_modules/.package-lock.json" -nt "$web/package-lock.json" ]]; then
    echo "install-deps: npm ci in $web"
    # Debian's nodejs reads the system's CA store; a Node from elsewhere on PATH (nvm, upstream
    # tarballs) trusts only its own list. Give it the system's too (ca-certificates, and a
    # proxy's CA that an administrator put in /usr/local/share/ca-certificates).
    local system_cas=/etc/ssl/certs/ca-certificates.crt
    if [[ -z "${NODE_EXTRA_CA_CERTS:-}" && -r "$system_cas" ]]; then
      NODE_EXTRA_CA_CERTS="$system_cas" npm ci --prefix "$web" --no-audit --no-fund --loglevel=error
    else
      npm ci --prefix "$web" --no-audit --no-fund --loglevel=error
    fi
  fi
}

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} == 0 )); then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
  web_deps
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Debian starts the daemons of the packages it installs: Prometheus would serve its UI on every
# interface with no authentication, HAProxy its sample config. The tests start their own; those
# installed here are stopped and disabled (a machine that had them before keeps them as they were).
if [[ -d /run/systemd/system ]]; then
  for svc in prometheus haproxy; do
    if [[ " ${missing[*]} " == *" $svc "* ]]; then
      $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 && echo "install-deps: stopped and disabled the $svc service Debian started"
    fi
  done
fi
web_deps
