#!/usr/bin/env bash
# Installs Debian's PyTorch (python3-torch, with python3-numpy) for the
# DistributedDataParallel anchor of `bazel run -c opt //bench:scaling`.
# A bench-only dependency: nothing in //... builds or tests against it.
# Idempotent: does nothing when the packages are installed and import.
set -euo pipefail
# shellcheck source=bench/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"

PKGS=(python3-torch python3-numpy)
# Debian's packages install into /usr/lib/python3/dist-packages: use the
# system interpreter, not whatever python3 comes first on PATH.
PY=/usr/bin/python3

installed() {
  pkgs_installed "${PKGS[@]}" || return 1
  "$PY" -c 'import torch, numpy, torch.distributed' >/dev/null 2>&1 || return 1
}

if installed; then
  echo "setup_torch: PyTorch already installed: torch $("$PY" -c 'import torch; print(torch.__version__)')"
  exit 0
fi

apt_install "${PKGS[@]}"
if ! installed; then
  echo "setup_torch: packages installed but '$PY -c \"import torch\"' fails" >&2
  exit 1
fi
echo "setup_torch: installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
