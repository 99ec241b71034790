#!/usr/bin/env bash
# Installs Open MPI (mpirun + mpicc) for the MPI_Allreduce baseline of
# `bazel run -c opt //bench:allreduce`. Not a build dependency of //...:
# the benchmark compiles bench/mpi_allreduce.c with mpicc at run time.
# Idempotent: does nothing when both packages are installed.
set -euo pipefail
# shellcheck source=bench/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"

PKGS=(openmpi-bin libopenmpi-dev)

installed() {
  pkgs_installed "${PKGS[@]}" || return 1
  command -v mpirun >/dev/null 2>&1 || return 1
  command -v mpicc >/dev/null 2>&1 || command -v mpicc.openmpi >/dev/null 2>&1 || return 1
}

if installed; then
  echo "setup_mpi: Open MPI already installed: $(mpirun --version 2>/dev/null | head -n 1)"
  exit 0
fi

apt_install "${PKGS[@]}"
if ! installed; then
  echo "setup_mpi: Open MPI packages installed but mpirun/mpicc not found" >&2
  exit 1
fi
echo "setup_mpi: installed $(mpirun --version 2>/dev/null | head -n 1)"
