#!/bin/sh
# deps.sh — install the Debian 12 packages kiln needs; safe to run again.
#
# Usage: scripts/deps.sh [group...]
#   build     compilers (clang-14 with its sanitizer and libFuzzer runtimes for
#             make fuzz), BLAS/LAPACK, OpenMP, zlib, stb, and for the Vulkan
#             backend the loader, glslc, spirv-val, Mesa's lavapipe (a Vulkan
#             device on the CPU) and the validation layers (to build and test)
#   data      Fashion-MNIST and fortunes (for the examples)
#   cross     the ARM64 cross compiler and qemu-user (make test builds and runs
#             the suite for ARM64 under emulation)
#   mpi       Open MPI (mpicc, mpirun): make MPI=1 builds kiln_dist, and make test
#             runs its tests under mpirun -np 2 and 3 (scripts/test_dist.sh)
#   fixtures  numpy and torch (only to regenerate tests/fixtures; tests never need them)
# No argument means "build data". Only missing packages are installed, and
# apt-get update runs only when something is missing.
set -eu

build_pkgs="gcc make pkg-config libopenblas-dev libopenblas-serial-dev liblapacke-dev zlib1g-dev libstb-dev clang
  clang-14 libclang-rt-14-dev
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools"
data_pkgs="dataset-fashion-mnist fortunes"
cross_pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
fixtures_pkgs="python3-numpy python3-torch"
mpi_pkgs="openmpi-bin libopenmpi-dev"

if [ $# -eq 0 ]; then set -- build data; fi

want=""
for group in "$@"; do
    case "$group" in
        build) want="$want $build_pkgs" ;;
        data) want="$want $data_pkgs" ;;
        cross) want="$want $cross_pkgs" ;;
        fixtures) want="$want $fixtures_pkgs" ;;
        mpi) want="$want $mpi_pkgs" ;;
        *) echo "deps: unknown group '$group' (expected: build data cross fixtures mpi)" >&2; exit 2 ;;
    esac
done

total=0
seen=" "
missing=""
for pkg in $want; do
    # a group given twice must not count or install its packages twice
    case "$seen" in *" $pkg "*) continue ;; esac
    seen="$seen$pkg "
    total=$((total + 1))
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing="$missing $pkg"
done
missing=${missing# }

if [ -z "$missing" ]; then
    echo "deps: all $total packages present"
    exit 0
fi
echo "deps: installing $missing"

if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "deps: not root and no sudo; install as root: apt-get install $missing" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# sudo drops the environment by default, so pass the frontend explicitly
if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; then
    echo "deps: apt-get update failed" >&2
    exit 1
fi
# $missing is split into words on purpose: one argument per package
# shellcheck disable=SC2086
if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; then
    echo "deps: apt-get install failed for: $missing" >&2
    exit 1
fi
