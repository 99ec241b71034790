# Sourced by the bench setup scripts (setup_mpi.sh, setup_torch.sh):
# apt_install PKG... installs Debian packages without recommends, with sudo
# when not root, waiting up to 600 s for the dpkg lock, and refreshes the
# package lists once when the first attempt fails (a fresh machine may have
# none, or stale ones).
apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
  fi
  local apt=("${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600)
  export DEBIAN_FRONTEND=noninteractive
  if ! "${apt[@]}" install -y --no-install-recommends "$@"; then
    "${apt[@]}" update
    "${apt[@]}" install -y --no-install-recommends "$@"
  fi
}

# pkgs_installed PKG... succeeds when dpkg reports every package installed.
pkgs_installed() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1
  done
}
