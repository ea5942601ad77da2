#!/usr/bin/env bash
# Installs everything trnccl needs to build, test and benchmark, from Debian packages only.
set -euo pipefail
packages=(
  g++ meson ninja-build pkg-config
  libfabric-dev libopenmpi-dev openmpi-bin libhwloc-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format
  python3-matplotlib
  python3-torch libtorch-dev pybind11-dev python3-dev
  iproute2 nftables procps
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
