#!/usr/bin/env bash
# Installs every Debian package lockstep needs to build, test and run.
# Idempotent: packages already present are skipped; safe to run twice.
set -euo pipefail
PKGS=(
  bazel-bootstrap g++ pkg-config zlib1g-dev
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev libgrpc-dev
  libabsl-dev libopenblas-dev libxxhash-dev libgtest-dev libgmock-dev libsqlite3-dev
  libssl-dev  # common/net:data_auth (libcrypto: data-plane HMACs), common/net:data_conn (libssl: --data_plane_tls)
  dataset-fashion-mnist python3 iproute2 nftables
  chromium fonts-dejavu-core nodejs
  python3-grpcio python3-protobuf python3-numpy
  docker-compose python3-yaml
  prometheus
  clang-14 libclang-rt-14-dev  # tests/fuzz (libFuzzer, ASan, UBSan)
  openssl  # deploy/certs.sh (mutual TLS certificates), tests/tls_e2e_test
  cmake dpkg-dev  # tests/tsan/run_tsan.sh (Debian's abseil source rebuilt with TSan)
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# npm packages the deploy tests run (dockerfilelint, dclint,
# kubernetes-models; versions locked in deploy/npm/package-lock.json),
# installed in $LOCKSTEP_NPM_PREFIX (default /opt/lockstep-npm), outside the
# Bazel workspace. Reinstalled only when the lock file changed.
NPM_PREFIX=${LOCKSTEP_NPM_PREFIX:-/opt/lockstep-npm}
NPM_SRC="$(cd "$(dirname "$0")" && pwd)/npm"
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs npm" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends nodejs npm >/dev/null
fi
if ! cmp -s "$NPM_SRC/package-lock.json" "$NPM_PREFIX/package-lock.json" ||
   [ ! -d "$NPM_PREFIX/node_modules" ]; then
  echo "setup: installing npm packages in $NPM_PREFIX" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || [ -w "$(dirname "$NPM_PREFIX")" ] || SUDO=sudo
  $SUDO mkdir -p "$NPM_PREFIX"
  $SUDO cp "$NPM_SRC/package.json" "$NPM_SRC/package-lock.json" "$NPM_PREFIX/"
  (cd "$NPM_PREFIX" && $SUDO npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null)
fi
echo "setup: all packages present" >&2
