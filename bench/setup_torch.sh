#!/usr/bin/env bash
# Installs Debian's PyTorch (python3-torch, with python3-numpy) for the
# DistributedDataParallel anchor of `bazel run -c opt //bench:scaling`.
# A bench-only dependency: nothing in //... builds or tests against it.
# Idempotent: does nothing when the packages are installed and import.
set -euo pipefail

PKGS=(python3-torch python3-numpy)
# Debian's packages install into /usr/lib/python3/dist-packages: use the
# system interpreter, not whatever python3 comes first on PATH.
PY=/usr/bin/python3

installed() {
  local p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1
  done
  "$PY" -c 'import torch, numpy, torch.distributed' >/dev/null 2>&1 || return 1
}

if installed; then
  echo "setup_torch: PyTorch already installed: torch $("$PY" -c 'import torch; print(torch.__version__)')"
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
  echo "setup_torch: packages installed but '$PY -c \"import torch\"' fails" >&2
  exit 1
fi
echo "setup_torch: installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
