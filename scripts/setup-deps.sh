#!/usr/bin/env bash
# Installs the Debian packages streamknn builds and tests with (nothing is vendored or
# downloaded at build time). As root it runs apt-get; otherwise it prints the exact command.
# Usage: scripts/setup-deps.sh [--check]   (--check: report only, never install)
set -euo pipefail

packages=(
  build-essential cmake            # compilers and the build
  libeigen3-dev                    # Eigen (CPU kernels)
  doctest-dev                      # C++ test framework
  libcli11-dev                     # command-line parsing for the streamknn runner
  python3 python3-numpy python3-sklearn python3-matplotlib python3-pytest  # parity tests, plots
  pybind11-dev python3-dev         # the Python package
  python3-setuptools python3-wheel python3-build python3-venv  # pip install . / python3 -m build, offline
  clang libclang-rt-14-dev         # libFuzzer harnesses and sanitizer runtimes
  libopenmpi-dev openmpi-bin python3-mpi4py  # the sharded store (lib/mpi) and its Python side
)

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#packages[@]} Debian packages present"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "setup-deps: missing: ${missing[*]}"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "setup-deps: missing Debian packages: ${missing[*]}" >&2
  echo "setup-deps: install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
