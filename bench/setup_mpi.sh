#!/usr/bin/env bash
# Installs Open MPI (mpirun + mpicc) for the MPI_Allreduce baseline of
# `bazel run -c opt //bench:allreduce`. Not a build dependency of //...:
# the benchmark compiles bench/mpi_allreduce.c with mpicc at run time.
# Idempotent: does nothing when both packages are installed.
set -euo pipefail

PKGS=(openmpi-bin libopenmpi-dev)

installed() {
  local p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1
  done
  command -v mpirun >/dev/null 2>&1 || return 1
  command -v mpicc >/dev/null 2>&1 || command -v mpicc.openmpi >/dev/null 2>&1 || return 1
}

if installed; then
  echo "setup_mpi: Open MPI already installed: $(mpirun --version 2>/dev/null | head -n 1)"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
APT=("${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600)
if ! "${APT[@]}" install -y --no-install-recommends "${PKGS[@]}"; then
  # The package lists may be missing or stale on a fresh machine.
  "${APT[@]}" update
  "${APT[@]}" install -y --no-install-recommends "${PKGS[@]}"
fi

if ! installed; then
  echo "setup_mpi: Open MPI packages installed but mpirun/mpicc not found" >&2
  exit 1
fi
echo "setup_mpi: installed $(mpirun --version 2>/dev/null | head -n 1)"
