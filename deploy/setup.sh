#!/usr/bin/env bash
# Installs every Debian package lockstep needs to build, test and run.
# Idempotent: packages already present are skipped; safe to run twice.
set -euo pipefail
PKGS=(
  bazel-bootstrap g++ pkg-config zlib1g-dev
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev libgrpc-dev
  libabsl-dev libopenblas-dev libxxhash-dev libgtest-dev libgmock-dev
  dataset-fashion-mnist python3 iproute2
  python3-grpcio python3-protobuf python3-numpy
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
echo "setup: all packages present" >&2
